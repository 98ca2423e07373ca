// Recurrent (RNN) mode of linear attention for incremental decoding (docs/design.md section 2):
// one token per call against a per-(batch, head) state S' = [S | z] (d x (e+1)).
#include <omp.h>

#include <algorithm>

#include "kernels/check.h"
#include "kernels/cpu/linear_attention_simd.h"
#include "kernels/linear_attention.h"

namespace tarn::kernels::cpu {

void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                           const float* a, const float* b, const float* v, float* state,
                           float* out) {
  TARN_ASSERT(dims.d > 0 && dims.e > 0 && dims.batch >= 0 && dims.heads >= 0,
              "linear_attention_step: bad dims d=", dims.d, " e=", dims.e);
  TARN_ASSERT(feature_map_is_row_local(cfg.feature_map), "linear_attention_step: the ",
              feature_map_name(cfg.feature_map), " feature map cannot be fused");
  TARN_ASSERT(cfg.eps > 0.0f, "linear_attention_step: eps must be positive, got ", cfg.eps);
  const int64_t slices = dims.batch * dims.heads, d = dims.d, e = dims.e, w = e + 1;
  // Below this much work per call, threads cost more than they save.
  constexpr int64_t kParallelMinFloats = 1 << 15;
  const FeatureMap phi = cfg.feature_map;
#pragma omp parallel for schedule(static) if (slices * d * w >= kParallelMinFloats)
  for (int64_t bh = 0; bh < slices; ++bh) {
    const float* ar = a + bh * d;
    const float* br = b + bh * d;
    const float* vr = v + bh * e;
    float* S = state + bh * d * w;
    float* o = out + bh * e;
    const bool masked = cfg.key_padding_mask && cfg.key_padding_mask[bh / dims.heads] != 0.0f;
    // phi one element at a time (the row max first for exp): the step needs no scratch.
    auto feature = [phi](float x, float row_max) {
      switch (phi) {
        case FeatureMap::elu1: return x > 0.0f ? x + 1.0f : simd::exp(x);
        case FeatureMap::relu: return std::max(x, 0.0f);
        case FeatureMap::exp: return simd::exp(x - row_max);
        default: return x;
      }
    };
    const float a_max = *std::max_element(ar, ar + d), b_max = *std::max_element(br, br + d);
    if (!masked)
      for (int64_t k = 0; k < d; ++k) {
        const float bk = feature(br[k], b_max);
        float* row = S + k * w;
        for (int64_t j = 0; j < e; ++j) row[j] += bk * vr[j];
        row[e] += bk;
      }
    std::fill(o, o + e, 0.0f);
    float den = 0.0f;
    for (int64_t k = 0; k < d; ++k) {
      const float ak = feature(ar[k], a_max);
      const float* row = S + k * w;
      for (int64_t j = 0; j < e; ++j) o[j] += ak * row[j];
      den += ak * row[e];
    }
    const float inv = 1.0f / (den + cfg.eps);
    for (int64_t j = 0; j < e; ++j) o[j] *= inv;
  }
}

}  // namespace tarn::kernels::cpu
