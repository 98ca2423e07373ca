#include "layers/attention/common.h"

#include "framework/ops/elementwise.h"
#include "framework/ops/nn.h"
#include "framework/ops/shape_ops.h"
#include "framework/staging.h"

namespace tarn {

const PaddingMask& AttentionInputs::padding() const {
  static const PaddingMask none;
  return pad ? *pad : none;
}

Tensor split_heads(const Tensor& x, const AttentionShape& s) {
  const int64_t b = x.size(0), n = x.size(1);
  return permute(reshape(x, {b, n, s.heads, s.head_dim}), {0, 2, 1, 3});
}

Tensor merge_heads(const Tensor& x) {
  const int64_t b = x.size(0), h = x.size(1), n = x.size(2), dh = x.size(3);
  return reshape(permute(x, {0, 2, 1, 3}), {b, n, h * dh});
}

Tensor padding_tensor(const PaddingMask& pad, int64_t batch, int64_t length, Device device) {
  if (pad.empty()) return Tensor();
  TARN_ASSERT(static_cast<int64_t>(pad.size()) == batch * length, "padding mask: ", pad.size(), " flags for (",
              batch, ", ", length, ")");
  if (const StagedBatch* staged = StagedBatch::active()) {  // shared by every attention of the batch
    const Tensor t = staged->mask(pad, /*keep=*/false, device);
    if (t.defined()) return t.view({batch, length});
  }
  Tensor t = Tensor::empty({batch, length});
  float* p = t.f32();
  for (size_t i = 0; i < pad.size(); ++i) p[i] = pad[i] ? 1.0f : 0.0f;
  return t.to(device);  // built on the host, copied once
}

Tensor padding_rows(const PaddingMask& pad, int64_t batch, int64_t length, Device device) {
  if (pad.empty()) return Tensor();
  return padding_tensor(pad, batch, length, device).view({batch, 1, length});
}

Tensor key_keep(int64_t batch, int64_t nk, const PaddingMask& pad, Device device) {
  if (const StagedBatch* staged = StagedBatch::active()) {
    const Tensor t = staged->mask(pad, /*keep=*/true, device);
    if (t.defined()) return t.view({batch, 1, nk, 1});
  }
  Tensor keep = Tensor::empty({batch, 1, nk, 1});
  float* p = keep.f32();
  for (int64_t i = 0; i < batch * nk; ++i) p[i] = pad[i] ? 0.0f : 1.0f;
  return keep.to(device);
}

void check_padding(const char* what, const PaddingMask& pad, int64_t batch, int64_t length) {
  TARN_ASSERT(pad.empty() || static_cast<int64_t>(pad.size()) == batch * length, what, ": key padding mask has ",
              pad.size(), " flags, expected batch ", batch, " x keys ", length, " = ", batch * length);
}

void check_one_row_at_position(const char* what, const Tensor& q, int64_t position) {
  TARN_ASSERT(q.size(1) == 1 && position >= 0, what, " cross-attention step: one query row at a known position, got ",
              q.shape().str(), " at position ", position);
}

Tensor append_ones(const Tensor& v) {
  Shape s = v.shape();
  s[3] = 1;
  return concat({v, Tensor::ones(s, v.device())}, 3);
}

Tensor normalise(const Tensor& u, float eps) {
  const int64_t e = u.size(3) - 1;
  return div(slice(u, 3, 0, e), add_scalar(slice(u, 3, e, e + 1), eps));
}

HeadGate::HeadGate(AttentionSite& site, const std::string& name, float initial_bias)
    : proj_(std::make_unique<Linear>(site.shape().d_model, site.shape().heads, site.init())),
      heads_(site.shape().heads) {
  if (initial_bias != 0.0f) proj_->start_bias_at(initial_bias);
  site.add_module(name, *proj_);
}

Tensor HeadGate::mix(const Tensor& a, const Tensor& b, const Tensor& x) const {
  // (B, N, H) -> (B, H, N, 1): one weight per head and position.
  const Tensor g = sigmoid(proj_->forward(x));
  const Tensor gate = reshape(permute(g, {0, 2, 1}), {x.size(0), heads_, x.size(1), 1});
  return add(b, mul(gate, sub(a, b)));
}

}  // namespace tarn
