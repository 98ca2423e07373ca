#include "framework/device.h"

#include "kernels/check.h"
#include "kernels/enum_name.h"

namespace tarn {

size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

const char* dtype_name(DType t) { return enum_name(t, {"f32", "bf16", "f16"}); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string idx = s.substr(5);
    TARN_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
               "device: expected cpu, cuda or cuda:N, got \"", s, "\"");
    return cuda(std::stoi(idx));
  }
  throw Error(str_cat("device: expected cpu, cuda or cuda:N, got \"", s, "\""));
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace tarn
