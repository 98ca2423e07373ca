#include "framework/precision.h"

#include "framework/backend.h"

namespace tarn {

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "f32"; }

Precision parse_precision(const std::string& s, const std::string& key) {
  if (s == "f32") return Precision::f32;
  if (s == "bf16") return Precision::bf16;
  throw Error(key + ": '" + s + "' is not a precision (f32 or bf16)");
}

kernels::cpu::Bf16GemmEngine bf16_gemm_engine(Device device) {
  return backend_for(device).bf16_gemm_engine(device.index);
}

}  // namespace tarn
