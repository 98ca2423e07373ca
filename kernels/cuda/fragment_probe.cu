// kernels/cuda_fragment_probe.h: one warp runs every ldmatrix form and one mma.sync on the
// caller's data and writes each lane's registers out.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_mma.cuh"
#include "kernels/cuda_fragment_probe.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

template <int kCount>
__device__ void store_registers(const uint32_t (&r)[kCount], uint32_t* out) {
  for (int i = 0; i < kCount; ++i) out[i] = r[i];
}

__global__ void __launch_bounds__(32) fragment_probe_kernel(const uint16_t* tile, const int* lane_rows,
                                                            const uint32_t* a, const uint32_t* b, const float* c,
                                                            uint32_t* loaded, float* d) {
  __align__(16) __shared__ uint16_t tile_s[16 * 16];
  const int lane = threadIdx.x;
  for (int i = lane; i < 16 * 16; i += 32) tile_s[i] = tile[i];
  __syncwarp();
  const uint16_t* row = tile_s + lane_rows[lane];
  uint32_t* out = loaded + lane * kFragmentProbeRegisters;
  uint32_t x1[1], x2[2], x4[4];
  warp_mma::ldmatrix_x1(x1, row);
  store_registers(x1, out);
  warp_mma::ldmatrix_x2(x2, row);
  store_registers(x2, out + 1);
  warp_mma::ldmatrix_x4(x4, row);
  store_registers(x4, out + 3);
  warp_mma::ldmatrix_x1_trans(x1, row);
  store_registers(x1, out + 7);
  warp_mma::ldmatrix_x2_trans(x2, row);
  store_registers(x2, out + 8);
  warp_mma::ldmatrix_x4_trans(x4, row);
  store_registers(x4, out + 10);

  warp_mma::FragA fa;
  warp_mma::FragB fb;
  warp_mma::FragC fc;
  for (int i = 0; i < 4; ++i) fa.r[i] = a[lane * 4 + i];
  for (int i = 0; i < 2; ++i) fb.r[i] = b[lane * 2 + i];
  for (int i = 0; i < 4; ++i) fc.r[i] = c[lane * 4 + i];
  warp_mma::mma(fc, fa, fb);
  for (int i = 0; i < 4; ++i) d[lane * 4 + i] = fc.r[i];
}

}  // namespace

void fragment_probe(const uint16_t* tile, const int* lane_rows, const uint32_t* a, const uint32_t* b, const float* c,
                    uint32_t* loaded, float* d) {
  tarn::launch(fragment_probe_kernel, dim3(1), dim3(32), 0, nullptr, tile, lane_rows, a, b, c, loaded, d);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
