#pragma once
// The arithmetic of matrix products (training.precision). f32: everything in f32. bf16: mixed
// precision as other frameworks mean it: tensors, parameters, optimizer state, layer norm,
// softmax, the loss and the gradient reductions stay f32; matmul and linear (framework/ops/
// matmul.h) round their operands to bf16 and multiply on bf16 hardware with f32 accumulation
// and an f32 result. The rounding happens inside those ops, never silently elsewhere, so autograd
// only ever sees f32 tensors and every gradient is accumulated in f32.
#include <cstdint>
#include <string>

#include "framework/device.h"
#include "kernels/gemm.h"

namespace tarn {

enum class Precision : uint8_t { f32, bf16 };

const char* precision_name(Precision p);  // "f32" / "bf16"
// "f32" / "bf16"; throws tarn::Error naming `key` on anything else.
Precision parse_precision(const std::string& s, const std::string& key = "training.precision");

// What multiplies bf16 operands on `device`, and whether it is bf16 hardware (kernels/gemm.h):
// "oneDNN 2.6.3 bf16 matmul (avx512_core_bf16)", "cuBLAS bf16 tensor cores (sm_90)", or why not.
kernels::cpu::Bf16GemmEngine bf16_gemm_engine(Device device);

}  // namespace tarn
