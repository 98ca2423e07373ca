#include "layers/attention/hybrid.h"

#include <algorithm>

#include "layers/attention/delta.h"
#include "layers/attention/linear.h"
#include "layers/attention/registry.h"

namespace tarn {

std::vector<Tensor*> HybridState::tensors() {
  std::vector<Tensor*> all = local.tensors();
  for (Tensor* t : global->tensors()) all.push_back(t);
  return all;
}

std::unique_ptr<DecodeState> HybridState::copy() const {
  auto c = std::make_unique<HybridState>();
  c->length = length;
  c->local = local;
  c->global = global->copy();
  return c;
}

double HybridAttention::parameters(const AttentionConfig& a, const AttentionSizes& s) {
  const double h = std::max(1.0, s.heads);
  const double global = a.global == AttentionKind::linear ? LinearAttention::parameters(a, s) : DeltaAttention::parameters(a, s);
  return s.d_model * h + h + global;
}

double HybridAttention::decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens) {
  const double global = a.global == AttentionKind::linear ? LinearAttention::decode_state_bytes(a, s, tokens)
                                                          : DeltaAttention::decode_state_bytes(a, s, tokens);
  const double window = s.cross ? tokens : std::min(tokens, static_cast<double>(a.window));
  return (s.cross ? 1.0 : 2.0) * (global + SoftmaxAttention::kv_bytes(s, window));
}

AttentionTrainingBytes HybridAttention::training_bytes(const AttentionConfig& a, const AttentionSizes& s,
                                                      const AttentionBatch& b) {
  AttentionTrainingBytes t = SoftmaxAttention::training_bytes(a, s, b);
  if (a.global == AttentionKind::linear) {
    const AttentionTrainingBytes g = LinearAttention::training_bytes(a, s, b);
    t.kept += g.kept;
    t.workspace = std::max(t.workspace, g.workspace);
  }
  return t;
}

void HybridAttention::export_settings(const AttentionConfig& a, json::Json& o) {
  o["window"] = a.window;
  o["global"] = attention_kind_name(a.global);
  if (a.global != AttentionKind::linear) return DeltaAttention::export_settings(a, o);
  AttentionConfig global = a;
  global.align_decay = 0;  // the window aligns; a hybrid's align_decay is ignored (and not exported)
  LinearAttention::export_settings(global, o);
}

HybridAttention::HybridAttention(AttentionSite& site) : site_(site), local_(site, site.config().window) {
  const AttentionConfig& config = site.config();
  // The registration order is the parameters' order in checkpoints and the optimizer: over
  // delta, the "delta" block before the gate; over linear, the gate before the feature map's.
  if (config.global == AttentionKind::linear) {
    gate_ = std::make_unique<HeadGate>(site, "hybrid_gate");
    global_ = std::make_unique<LinearAttention>(site);
  } else {
    TARN_ASSERT(!site.shape().cross, "attention: hybrid cross-attention takes global linear only");
    global_ = std::make_unique<DeltaAttention>(site, config.global == AttentionKind::delta);
    gate_ = std::make_unique<HeadGate>(site, "hybrid_gate");
  }
}

Tensor HybridAttention::mix(const Tensor& local, const Tensor& global, const Tensor& x) const {
  return merge_heads(gate_->mix(local, split_heads(global, site_.shape()), x));
}

Tensor HybridAttention::forward(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  const Tensor global = global_->forward(in);
  return mix(local_.context(split_heads(in.q, s), split_heads(in.k, s), split_heads(in.v, s), in.padding()), global,
             in.x);
}

std::unique_ptr<DecodeState> HybridAttention::start_self(int64_t batch) const {
  auto state = std::make_unique<HybridState>();
  state->global = global_->start_self(batch);
  state->local = static_cast<KeyValueState&>(*local_.start_self(batch));
  return state;
}

Tensor HybridAttention::step_self(const AttentionInputs& in, DecodeState& state) const {
  auto& st = static_cast<HybridState&>(state);
  const AttentionShape& s = site_.shape();
  st.global->length = st.length;
  const Tensor global = global_->step_self(in, *st.global);
  return mix(local_.step_self_heads(split_heads(in.q, s), split_heads(in.k, s), split_heads(in.v, s), st.local), global,
             in.x);
}

std::unique_ptr<DecodeState> HybridAttention::precompute_cross(const AttentionInputs& in) const {
  auto state = std::make_unique<HybridState>();
  state->local = static_cast<KeyValueState&>(*local_.precompute_cross(in));
  state->global = global_->precompute_cross(in);
  return state;
}

Tensor HybridAttention::step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const {
  check_one_row_at_position("hybrid", in.q, position);
  const auto& st = static_cast<const HybridState&>(state);
  const Tensor local = local_.step_cross_heads(split_heads(in.q, site_.shape()), st.local, position);
  return mix(local, global_->step_cross(in, *st.global, position), in.x);
}

// The registry's entry of hybrid attention (builtin_kinds.inc).
AttentionKindEntry hybrid_entry() {
  AttentionKindEntry e;
  e.name = "hybrid";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> { return std::make_unique<HybridAttention>(s); };
  e.parameters = HybridAttention::parameters;
  e.buffer_values = [](const AttentionConfig& a, const AttentionSizes& s) {
    return a.global == AttentionKind::linear ? FeatureMapLayer::buffer_values(a, s) : 0.0;
  };
  e.decode_state_bytes = HybridAttention::decode_state_bytes;
  e.export_settings = HybridAttention::export_settings;
  e.training_bytes = HybridAttention::training_bytes;
  e.settings = hybrid_settings();
  return e;
}

}  // namespace tarn
