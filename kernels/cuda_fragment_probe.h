#pragma once
// What one warp's registers hold after ldmatrix and mma.sync (kernels/cuda/warp_mma.cuh), read
// back lane by lane, so that tests/cuda/warp_mma_test.cpp can check the fragment layouts against
// the PTX ISA's tables on the emulator and on a GPU alike (kernels/cuda/fragment_probe.cu).
//
// fragment_probe (one warp, one launch), all pointers device memory:
//   tile       256 bf16 bits: a 16x16 row-major tile, copied to shared memory
//   lane_rows  32 ints: the element offset (a multiple of 8) into the tile of the row address
//              lane l gives to every ldmatrix
//   loaded     32 x kFragmentProbeRegisters: lane l's registers after, in order, ldmatrix x1,
//              x2, x4, x1.trans, x2.trans, x4.trans
//   a, b, c    32 x 4, 32 x 2, 32 x 4: each lane's FragA, FragB registers and FragC floats
//   d          32 x 4: each lane's accumulator after mma(c, a, b)
#include <cstdint>

#include "kernels/cuda_api.h"

namespace tarn::kernels {
constexpr int kFragmentProbeRegisters = 1 + 2 + 4 + 1 + 2 + 4;
}

#define TARN_CUDA_FRAGMENT_PROBE_API                                                                \
  void fragment_probe(const uint16_t* tile, const int* lane_rows, const uint32_t* a, const uint32_t* b, \
                      const float* c, uint32_t* loaded, float* d);

TARN_DECLARE_CUDA_API(TARN_CUDA_FRAGMENT_PROBE_API)

#undef TARN_CUDA_FRAGMENT_PROBE_API
