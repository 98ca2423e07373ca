// Attention pieces composed from other framework ops, for devices whose kernels lack a fused
// version (framework/ops/attention_composed.h).
#include "framework/ops/attention_composed.h"

#include <cmath>
#include <vector>

#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/ops/shape_ops.h"
#include "kernels/softmax_attention.h"

namespace tarn::ops_internal {

// A row-local feature map as a standalone op on a non-CPU device (linear attention fuses them
// into its kernels; this serves feature_map() called on its own, e.g. the --unfused ablation):
// elu1 and relu from elementwise ops on that device (the same values and gradients:
// elu(x) + 1 = relu(x) + exp(-relu(-x))); exp through the CPU kernel on a host copy, the
// gradient copied back. favor has device kernels of its own (feature_map() calls them).
Tensor feature_map_off_host(const Tensor& x, FeatureMap kind, FeatureRole role, const Tensor& projection) {
  switch (kind) {
    case FeatureMap::identity:
      return x;
    case FeatureMap::relu:
      return relu(x);
    case FeatureMap::elu1:
      return add(relu(x), exp(neg(relu(neg(x)))));
    case FeatureMap::exp:
      break;
    case FeatureMap::favor:
      TARN_ASSERT(false, "feature_map_off_host: favor runs on the device's own kernels");
    case FeatureMap::taylor:
    case FeatureMap::hedgehog:
      TARN_ASSERT(false, "feature_map_off_host: ", kernels::cpu::feature_map_name(kind),
                  " is computed by the layer (layers/attention/feature_map.h)");
  }
  const Tensor w = projection.defined() ? projection.to(Device::cpu()) : Tensor();
  return to_device(feature_map(to_device(x, Device::cpu()), kind, role, w), x.device());
}

// Softmax attention from matmul, softmax and elementwise ops, for devices without a blocked
// kernel: the same visibility rules as kernels/softmax_attention.h (padding and causal masks
// built on the host, a query that sees no key gets 0), with an N x N score matrix.
Tensor softmax_attention_composed(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const SoftmaxAttentionOptions& opt) {
  const int64_t batch = q.size(0), n_q = q.size(2), n_k = k.size(2);
  const float s = opt.scale != 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(q.size(3)));
  Tensor scores = scale(matmul(q, k, false, true), s);  // (B, H, Nq, Nk)
  if (!opt.key_padding_mask.defined() && !opt.causal && opt.window == 0) return matmul(softmax(scores), v);
  // Masked scores get a large negative bias: exp() of it is 0 in f32 and, unlike -inf, keeps a
  // fully masked row finite (it is zeroed afterwards, as the kernel does).
  constexpr float kMaskedScore = -1e9f;
  const std::vector<float> pad =
      opt.key_padding_mask.defined() ? opt.key_padding_mask.to_vector() : std::vector<float>();
  Tensor bias = Tensor::empty(Shape{batch, 1, n_q, n_k});
  Tensor sees = Tensor::empty(Shape{batch, 1, n_q, 1});
  float* pb = bias.f32();
  float* ps = sees.f32();
  bool all_see = true;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n_q; ++i) {
      bool any = false;
      for (int64_t j = 0; j < n_k; ++j) {
        const kernels::cpu::KeyRange keys = kernels::cpu::visible_keys(i, n_k, opt.causal, opt.window);
        const bool masked = j < keys.begin || j >= keys.end || (!pad.empty() && pad[b * n_k + j] != 0.0f);
        pb[(b * n_q + i) * n_k + j] = masked ? kMaskedScore : 0.0f;
        any = any || !masked;
      }
      ps[b * n_q + i] = any ? 1.0f : 0.0f;
      all_see = all_see && any;
    }
  Tensor out = matmul(softmax(add(scores, bias.to(q.device()))), v);
  return all_see ? out : mul(out, sees.to(q.device()));
}

}  // namespace tarn::ops_internal
