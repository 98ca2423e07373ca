#include "layers/attention.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/ops/attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduce.h"
#include "layers/attention/registry.h"

namespace tarn {

// The module as its kind sees it while being built and afterwards.
class MultiHeadAttention::Site : public AttentionSite {
 public:
  Site(MultiHeadAttention& m, ParamInit& init) : m_(m), init_(&init) {}
  void built() { init_ = nullptr; }  // the initialiser is the constructor's

  const AttentionConfig& config() const override { return m_.config_; }
  const AttentionShape& shape() const override { return m_.shape_; }
  ParamInit& init() const override {
    TARN_ASSERT(init_, "attention: a kind draws its parameters while it is built, not later");
    return *init_;
  }
  DropoutStreams& dropout() const override { return *m_.dropout_; }
  float attention_dropout() const override { return m_.attention_dropout_; }
  bool training() const override { return m_.training(); }
  Precision precision() const override { return m_.precision(); }
  Device device() const override { return m_.q_proj.weight.device(); }
  void add_module(const std::string& name, Module& child) override { m_.register_module(name, child); }
  void add_parameter(const std::string& name, Tensor& t, bool keep_initial_value) override {
    m_.register_parameter(name, t, keep_initial_value ? Init::kept_initial_value : Init::drawn);
  }
  void add_buffer(const std::string& name, Tensor& t) override { m_.register_buffer(name, t); }

 private:
  MultiHeadAttention& m_;
  ParamInit* init_;
};

void reorder(AttentionCache& cache, const std::vector<int64_t>& indices) {
  if (!cache.defined()) return;
  for (Tensor* t : cache.state().tensors()) {
    if (!t->defined()) continue;
    Shape s = t->shape();
    const int64_t rows = s[0];
    s[0] = static_cast<int64_t>(indices.size());
    Tensor out = Tensor::empty(s, t->device());
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t src = indices[i];
      TARN_ASSERT(src >= 0 && src < rows, "reorder: index ", src, " out of range for batch ", rows);
      out.narrow0(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1).copy_from(t->narrow0(src, src + 1));
    }
    *t = out;
  }
}

AttentionCache clone(const AttentionCache& cache) {
  AttentionCache c = cache;
  if (c.defined())
    for (Tensor* t : c.state().tensors())
      if (t->defined()) *t = t->clone();
  return c;
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t heads, const AttentionConfig& config, bool causal,
                                       float attention_dropout, ParamInit& init, DropoutStreams& dropout, bool cross,
                                       int64_t max_keys)
    : k_proj(d_model, d_model, init),
      v_proj(d_model, d_model, init),
      q_proj(d_model, d_model, init),
      out_proj(d_model, d_model, init),
      config_(config),
      attention_dropout_(attention_dropout),
      dropout_(&dropout) {
  TARN_ASSERT(heads > 0 && d_model % heads == 0, "attention: d_model ", d_model, " is not divisible by ", heads,
              " heads");
  TARN_ASSERT(!(causal && cross), "attention: cross-attention cannot be causal");
  shape_ = {d_model, heads, d_model / heads, causal, cross, max_keys};
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("q_proj", q_proj);
  register_module("out_proj", out_proj);
  site_ = std::make_unique<Site>(*this, init);
  kind_ = make_attention_kind_layer(*site_);
  site_->built();
}

MultiHeadAttention::~MultiHeadAttention() = default;

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  if (!transfer_ || !kind_->learns_from_softmax_teacher()) return own_forward(query, key_value, pad);
  Tensor teacher;
  {
    NoGradGuard no_grad;
    teacher = softmax_teacher(query, key_value, pad);
  }
  const Tensor diff = sub(own_forward(query, key_value, pad), teacher);
  transfer_->terms.push_back({transfer_name_, mean_all(mul(diff, diff))});
  return teacher;
}

Tensor MultiHeadAttention::softmax_teacher(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  const Tensor q = split_heads(q_proj.forward(query), shape_), k = split_heads(k_proj.forward(key_value), shape_),
               v = split_heads(v_proj.forward(key_value), shape_);
  SoftmaxAttentionOptions opt;
  opt.causal = shape_.causal;
  opt.key_padding_mask = padding_tensor(pad, q.size(0), k.size(2), q.device());
  opt.scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
  opt.precision = precision();
  return out_proj.forward(merge_heads(softmax_attention(q, k, v, opt)));
}

Tensor MultiHeadAttention::own_forward(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  const int64_t d = shape_.d_model;
  TARN_ASSERT(query.dim() == 3 && key_value.dim() == 3 && query.size(0) == key_value.size(0) && query.size(2) == d &&
                  key_value.size(2) == d,
              "attention: query ", query.shape().str(), " and key/value ", key_value.shape().str(),
              " must be (B, N, ", d, ") with the same B");
  const int64_t batch = query.size(0), nq = query.size(1), nk = key_value.size(1);
  check_padding("attention", pad, batch, nk);
  TARN_ASSERT(!shape_.causal || nq == nk, "causal attention: ", nq, " queries but ", nk, " keys");
  AttentionInputs in;
  in.x = query;
  in.source = key_value;
  in.q = q_proj.forward(query);
  in.k = k_proj.forward(key_value);
  in.v = v_proj.forward(key_value);
  in.pad = &pad;
  return out_proj.forward(kind_->forward(in));
}

AttentionCache MultiHeadAttention::start_self(int64_t batch) const {
  return AttentionCache(kind_->start_self(batch));
}

Tensor MultiHeadAttention::step_self(const Tensor& query, AttentionCache& cache) const {
  NoGradGuard no_grad;
  TARN_ASSERT(query.dim() == 3 && query.size(1) == 1 && query.size(2) == shape_.d_model,
              "attention step: query must be (B, 1, ", shape_.d_model, "), got ", query.shape().str());
  TARN_ASSERT(cache.defined(), "attention step: the cache was not started (start_self)");
  TARN_ASSERT(shape_.causal, "attention step: only causal self-attention decodes step by step");
  AttentionInputs in;
  in.x = in.source = query;
  in.q = q_proj.forward(query);
  in.k = k_proj.forward(query);
  in.v = v_proj.forward(query);
  const Tensor ctx = kind_->step_self(in, cache.state());
  ++cache.state().length;
  return out_proj.forward(ctx);
}

AttentionCache MultiHeadAttention::precompute_cross(const Tensor& key_value, const PaddingMask& pad) const {
  NoGradGuard no_grad;
  TARN_ASSERT(key_value.dim() == 3 && key_value.size(2) == shape_.d_model,
              "cross-attention: encoder output must be (B, S, ", shape_.d_model, "), got ", key_value.shape().str());
  TARN_ASSERT(!shape_.causal, "cross-attention: a causal attention module cannot precompute its keys");
  check_padding("cross-attention", pad, key_value.size(0), key_value.size(1));
  AttentionInputs in;
  in.source = key_value;
  in.k = k_proj.forward(key_value);
  in.v = v_proj.forward(key_value);
  in.pad = &pad;
  AttentionCache cache(kind_->precompute_cross(in));
  cache.state().length = key_value.size(1);
  return cache;
}

Tensor MultiHeadAttention::step_cross(const Tensor& query, const AttentionCache& cache, int64_t position) const {
  NoGradGuard no_grad;
  TARN_ASSERT(query.dim() == 3 && query.size(2) == shape_.d_model,
              "cross-attention step: query must be (B, N, ", shape_.d_model, "), got ", query.shape().str());
  TARN_ASSERT(cache.defined(), "cross-attention step: no precomputed encoder keys (precompute_cross)");
  AttentionInputs in;
  in.x = query;
  in.q = q_proj.forward(query);
  return out_proj.forward(kind_->step_cross(in, cache.state(), position));
}

}  // namespace tarn
