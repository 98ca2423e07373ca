#include "framework/io/state_dict.h"

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "kernels/check.h"

namespace tarn {
namespace {

// --- f32 <-> bf16 / f16, round to nearest even (host only: loading is not a hot path) ----------

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep it a (quiet) NaN
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float bf16_to_f32(uint16_t h) { return float_of(uint32_t{h} << 16); }

uint16_t f32_to_f16(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00);  // NaN, inf
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000) {                       // below 2^-14: f16 subnormal (or zero)
    if (abs < 0x33000000) return sign;          // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24 bits
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    if (rest > half || (rest == half && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = abs - 0x38000000;  // rebias exponent 127 -> 15
  r = (r + 0xFFF + ((r >> 13) & 1)) >> 13;
  return sign | static_cast<uint16_t>(r);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0x1F) return float_of(sign | 0x7F800000 | (mant << 13));
  if (exp != 0) return float_of(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return float_of(sign);
  return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(mant), -24);  // subnormal
}

float element_to_f32(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::bf16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::f16: return f16_to_f32(t.data<uint16_t>()[i]);
  }
  return 0.0f;
}

// `src` converted to `dtype`, on the host.
Tensor convert(const Tensor& src_any, DType dtype) {
  const Tensor src = src_any.to(Device::cpu());
  Tensor out = Tensor::empty(src.shape(), Device::cpu(), dtype);
  const int64_t n = src.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = element_to_f32(src, i);
    switch (dtype) {
      case DType::f32: out.data<float>()[i] = v; break;
      case DType::bf16: out.data<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::f16: out.data<uint16_t>()[i] = f32_to_f16(v); break;
    }
  }
  return out;
}

std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 10;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += str_cat(" and ", names.size() - kShown, " more");
  return s;
}

}  // namespace

TensorList state_dict(const Module& module) {
  TensorList out;
  for (const auto& [name, t] : module.named_parameters()) out.emplace_back(name, t->detach());
  for (const auto& [name, t] : module.named_buffers()) out.emplace_back(name, t->detach());
  return out;
}

StateDictLoadResult load_state_dict(Module& module, const TensorList& tensors, bool strict,
                                    std::string_view source) {
  const std::string what = str_cat("load_state_dict(", source, ")");
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TARN_CHECK(by_name.emplace(tensors[i].first, i).second, what, ": tensor ", tensors[i].first,
               " appears twice in ", source);
    TARN_CHECK(tensors[i].second.defined(), what, ": tensor ", tensors[i].first, " is undefined");
  }

  auto targets = module.named_parameters();
  const auto buffers = module.named_buffers();
  targets.insert(targets.end(), buffers.begin(), buffers.end());

  StateDictLoadResult result;
  std::vector<std::string> mismatches;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::unordered_map<std::string, bool> seen;
  for (const auto& [name, dst] : targets) {
    TARN_CHECK(seen.emplace(name, true).second, what, ": the module registers ", name, " twice");
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      result.missing.push_back(name);
      continue;
    }
    const Tensor& src = tensors[it->second].second;
    TARN_CHECK(dst->defined(), what, ": the module's tensor ", name, " is undefined");
    if (src.shape() != dst->shape()) {
      mismatches.push_back(str_cat(name, " has shape ", src.shape().str(), " in ", source, " but ",
                                   dst->shape().str(), " in the model"));
      continue;
    }
    copies.emplace_back(dst, &src);
  }
  for (const auto& [name, t] : tensors)
    if (!seen.count(name)) result.unexpected.push_back(name);

  if (!mismatches.empty()) {
    std::string msg = what + ": " + std::to_string(mismatches.size()) + " shape mismatch" +
                      (mismatches.size() > 1 ? "es" : "") + ":";
    for (size_t i = 0; i < mismatches.size() && i < 10; ++i) msg += "\n  " + mismatches[i];
    if (mismatches.size() > 10) msg += str_cat("\n  and ", mismatches.size() - 10, " more");
    throw Error(msg);
  }
  if (strict) {
    std::string msg;
    if (!result.missing.empty())
      msg += str_cat("\n  ", result.missing.size(), " model tensor", result.missing.size() > 1 ? "s are" : " is",
                     " missing from ", source, ": ", name_list(result.missing));
    if (!result.unexpected.empty())
      msg += str_cat("\n  ", result.unexpected.size(), " tensor", result.unexpected.size() > 1 ? "s" : "", " in ",
                     source, " the model does not have: ", name_list(result.unexpected));
    TARN_CHECK(msg.empty(), what, ": names do not match the model (strict):", msg);
  }

  for (auto& [dst, src] : copies) {
    if (dst->same_storage(*src) && dst->data<char>() == src->data<char>()) continue;  // loading itself
    if (src->dtype() == dst->dtype())
      dst->copy_from(*src);
    else
      dst->copy_from(convert(*src, dst->dtype()));
  }
  return result;
}

}  // namespace tarn
