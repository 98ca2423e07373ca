#include "layers/attention/registry.h"

#include <algorithm>
#include <mutex>

#include "kernels/check.h"
#include "layers/attention/aligned.h"
#include "layers/attention/delta.h"
#include "layers/attention/hybrid.h"
#include "layers/attention/linear.h"
#include "layers/attention/softmax.h"

namespace tarn {
namespace {

// The built-in kinds: the one list a kind with its own files joins.
using Layer = std::unique_ptr<AttentionKindLayer>;

AttentionKindEntry entry(std::string name, std::function<Layer(AttentionSite&)> make) {
  AttentionKindEntry e;
  e.name = std::move(name);
  e.make = std::move(make);
  return e;
}

std::vector<AttentionKindEntry> builtin_kinds() {
  AttentionKindEntry softmax = entry("softmax", [](AttentionSite& s) -> Layer { return std::make_unique<SoftmaxAttention>(s); });
  softmax.decode_state_bytes = SoftmaxAttention::decode_state_bytes;
  softmax.training_bytes = SoftmaxAttention::training_bytes;

  AttentionKindEntry linear = entry("linear", [](AttentionSite& s) -> Layer {
    if (s.config().align_decay > 0) return std::make_unique<AlignedCrossAttention>(s);
    return std::make_unique<LinearAttention>(s);
  });
  linear.parameters = [](const AttentionConfig& a, const AttentionSizes& s) {
    return a.align_decay > 0 ? AlignedCrossAttention::parameters(a, s) : LinearAttention::parameters(a, s);
  };
  linear.buffer_values = FeatureMapLayer::buffer_values;
  linear.decode_state_bytes = LinearAttention::decode_state_bytes;
  linear.export_settings = LinearAttention::export_settings;
  linear.training_bytes = [](const AttentionConfig& a, const AttentionSizes& s, const AttentionBatch& b) {
    return a.align_decay > 0 ? AlignedCrossAttention::training_bytes(a, s, b) : LinearAttention::training_bytes(a, s, b);
  };

  AttentionKindEntry delta = entry("delta", [](AttentionSite& s) -> Layer { return std::make_unique<DeltaAttention>(s, true); });
  delta.parameters = DeltaAttention::parameters;
  delta.decode_state_bytes = DeltaAttention::decode_state_bytes;
  delta.export_settings = DeltaAttention::export_settings;
  AttentionKindEntry gated = delta;
  gated.name = "gated";
  gated.make = [](AttentionSite& s) -> Layer { return std::make_unique<DeltaAttention>(s, false); };

  AttentionKindEntry hybrid = entry("hybrid", [](AttentionSite& s) -> Layer { return std::make_unique<HybridAttention>(s); });
  hybrid.parameters = HybridAttention::parameters;
  hybrid.buffer_values = [](const AttentionConfig& a, const AttentionSizes& s) {
    return a.global == AttentionKind::linear ? FeatureMapLayer::buffer_values(a, s) : 0.0;
  };
  hybrid.decode_state_bytes = HybridAttention::decode_state_bytes;
  hybrid.export_settings = HybridAttention::export_settings;
  hybrid.training_bytes = HybridAttention::training_bytes;
  return {softmax, linear, delta, gated, hybrid};
}

struct Registry {
  std::mutex mutex;
  std::vector<AttentionKindEntry> entries = builtin_kinds();
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_attention_kind(AttentionKindEntry entry) {
  TARN_CHECK(!entry.name.empty() && entry.make, "register_attention_kind: an entry needs a name and a builder");
  AttentionKind::named(entry.name);  // a recipe may name it from now on (AttentionKind::all)
  register_attention_kind_settings(entry.name, entry.settings);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = std::find_if(r.entries.begin(), r.entries.end(), [&](const auto& e) { return e.name == entry.name; });
  if (it != r.entries.end()) *it = std::move(entry);
  else r.entries.push_back(std::move(entry));
}

const AttentionKindEntry& attention_kind_entry(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const AttentionKindEntry& e : r.entries)
    if (e.name == name) return e;
  std::string known;
  for (const AttentionKindEntry& e : r.entries) known += (known.empty() ? "" : ", ") + e.name;
  throw Error(str_cat("unknown attention kind '", name, "' (known: ", known, ")"));
}

const AttentionKindEntry& attention_kind_entry(const AttentionConfig& a) {
  return attention_kind_entry(attention_kind_name(a.kind));
}

double attention_parameters(const AttentionConfig& a, const AttentionSizes& sizes) {
  const AttentionKindEntry& e = attention_kind_entry(a);
  return e.parameters ? e.parameters(a, sizes) : 0.0;
}

double attention_buffer_values(const AttentionConfig& a, const AttentionSizes& sizes) {
  const AttentionKindEntry& e = attention_kind_entry(a);
  return e.buffer_values ? e.buffer_values(a, sizes) : 0.0;
}

double attention_decode_state_bytes(const AttentionConfig& a, const AttentionSizes& sizes, double tokens) {
  const AttentionKindEntry& e = attention_kind_entry(a);
  return e.decode_state_bytes ? e.decode_state_bytes(a, sizes, tokens) : 0.0;
}

AttentionTrainingBytes attention_training_bytes(const AttentionConfig& a, const AttentionSizes& sizes,
                                                const AttentionBatch& batch) {
  const AttentionKindEntry& e = attention_kind_entry(a);
  return e.training_bytes ? e.training_bytes(a, sizes, batch) : AttentionTrainingBytes{};
}

json::Json attention_export_settings(const AttentionConfig& a) {
  json::Json o = json::Json::object();
  o["kind"] = attention_kind_name(a.kind);
  const AttentionKindEntry& e = attention_kind_entry(a);
  if (e.export_settings) e.export_settings(a, o);
  return o;
}

std::unique_ptr<AttentionKindLayer> make_attention_kind_layer(AttentionSite& site) {
  return attention_kind_entry(site.config()).make(site);
}

}  // namespace tarn
