#include "framework/init.h"

#include <cmath>
#include <string>

#include "kernels/parallel.h"

namespace tarn::init {
namespace {

// Box-Muller as Philox::normal(), on outputs (2i, 2i+1) past the generator's position.
float normal_at(const RngState& s, int64_t i) {
  constexpr float kTwoPi = 6.2831855f;
  const uint64_t k = s.offset + 2 * static_cast<uint64_t>(i);
  const float u = uint_to_uniform(philox_at(s.seed, s.stream, k));
  const float v = uint_to_uniform(philox_at(s.seed, s.stream, k + 1)) * kTwoPi;
  return std::sqrt(-2.0f * std::log(u)) * std::sin(v);
}

// Fills t with f(i) for every element i, in parallel, on the host; copies to the device after.
template <typename F>
void fill_by_index(Tensor& t, const char* who, F f) {
  TARN_ASSERT(t.defined(), who, ": the tensor is undefined");
  TARN_ASSERT(t.dtype() == DType::f32, who, ": only f32 tensors, got ", dtype_name(t.dtype()));
  Tensor host = t.device().is_cpu() ? t : Tensor::empty(t.shape());
  float* p = host.f32();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n >= kernels::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) p[i] = f(i);
  if (!t.device().is_cpu()) t.copy_from(host);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

void normal_(Tensor& t, float mean, float std, Philox& rng) {
  TARN_ASSERT(std >= 0.0f, "normal_: std must be >= 0, got ", std);
  const RngState s = rng.state();
  fill_by_index(t, "normal_", [&](int64_t i) { return mean + std * normal_at(s, i); });
  rng.skip(2 * static_cast<uint64_t>(t.numel()));
}

void uniform_(Tensor& t, float lo, float hi, Philox& rng) {
  TARN_ASSERT(lo <= hi, "uniform_: lo (", lo, ") must be <= hi (", hi, ")");
  const RngState s = rng.state();
  const float width = hi - lo;
  fill_by_index(t, "uniform_",
                [&](int64_t i) { return lo + width * uint_to_uniform(philox_at(s.seed, s.stream, s.offset + i)); });
  rng.skip(static_cast<uint64_t>(t.numel()));
}

void zeros_(Tensor& t) {
  TARN_ASSERT(t.defined(), "zeros_: the tensor is undefined");
  t.fill(0.0f);
}

void ones_(Tensor& t) {
  TARN_ASSERT(t.defined(), "ones_: the tensor is undefined");
  t.fill(1.0f);
}

Fans fans(const Tensor& t) {
  TARN_ASSERT(t.defined() && t.dim() >= 2, "init: fan in and fan out need a tensor of at least 2 dimensions, got ",
              t.defined() ? t.shape().str() : "(undefined)");
  int64_t receptive = 1;
  for (int i = 2; i < t.dim(); ++i) receptive *= t.size(i);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

void xavier_uniform_(Tensor& t, Philox& rng, float gain) {
  const Fans f = fans(t);
  TARN_ASSERT(f.fan_in + f.fan_out > 0, "xavier_uniform_: empty tensor ", t.shape().str());
  const float bound = gain * static_cast<float>(std::sqrt(6.0 / static_cast<double>(f.fan_in + f.fan_out)));
  uniform_(t, -bound, bound, rng);
}

void kaiming_uniform_(Tensor& t, Philox& rng, float a) {
  const Fans f = fans(t);
  TARN_ASSERT(f.fan_in > 0, "kaiming_uniform_: fan_in is 0 for shape ", t.shape().str());
  const double gain = std::sqrt(2.0 / (1.0 + static_cast<double>(a) * a));
  const float bound = static_cast<float>(gain * std::sqrt(3.0 / static_cast<double>(f.fan_in)));
  uniform_(t, -bound, bound, rng);
}

void linear_default_(Tensor& weight, Tensor& bias, Philox& rng) {
  kaiming_uniform_(weight, rng, kLinearDefaultA);
  if (!bias.defined()) return;
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fans(weight).fan_in)));
  uniform_(bias, -bound, bound, rng);
}

void bart_linear_(Tensor& weight, Tensor& bias, Philox& rng, float std) {
  normal_(weight, 0.0f, std, rng);
  if (bias.defined()) zeros_(bias);
}

void bart_embedding_(Tensor& weight, Philox& rng, int64_t padding_idx, float std) {
  TARN_ASSERT(weight.defined() && weight.dim() == 2, "bart_embedding_: expected a (vocab, dim) weight, got ",
              weight.defined() ? weight.shape().str() : "(undefined)");
  normal_(weight, 0.0f, std, rng);
  if (padding_idx < 0) return;
  TARN_ASSERT(padding_idx < weight.size(0), "bart_embedding_: padding_idx ", padding_idx, " is outside the ",
              weight.size(0), "-row embedding");
  Tensor row = weight.narrow0(padding_idx, padding_idx + 1);
  row.fill(0.0f);
}

void bart_init_(const Module& model, Philox& rng, const BartInitOptions& opt) {
  for (const auto& [name, p] : model.named_parameters()) {
    if (model.keeps_initial_value(p)) continue;  // its layer set it (Module::Init)
    if (contains(name, "layer_norm") || contains(name, "layernorm") || contains(name, "LayerNorm")) {
      if (ends_with(name, "weight")) {
        ones_(*p);
        continue;
      }
    }
    if (ends_with(name, "bias")) {
      zeros_(*p);
    } else if (ends_with(name, "shared.weight") || ends_with(name, "embed_tokens.weight")) {
      bart_embedding_(*p, rng, opt.padding_idx, opt.std);
    } else {
      normal_(*p, 0.0f, opt.std, rng);
    }
  }
}

}  // namespace tarn::init
