#pragma once
// The attention kinds by name (docs/design.md, "Adding an attention kind"). The built-in kinds
// are listed once, in registry.cpp; a program or test adds its own with register_attention_kind
// before it builds a model, and a recipe then names it like any other.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/io/json.h"
#include "layers/attention/kind.h"
#include "layers/attention/settings.h"

namespace tarn {

struct AttentionKindEntry {
  std::string name;  // the recipe's `kind`
  // Builds the kind's layer for one module; called once per module, in the model's
  // construction order.
  std::function<std::unique_ptr<AttentionKindLayer>(AttentionSite&)> make;
  // Estimates from the settings alone (null: none). The trained parameters of one module beyond
  // its four projections, and its buffers' values (FAVOR+'s projection).
  std::function<double(const AttentionConfig&, const AttentionSizes&)> parameters, buffer_values;
  // Decoding: a lower bound on the bytes of one decoder module's state per hypothesis after
  // `tokens` positions (self-attention) or for a source of `tokens` (cross), counting what a
  // step holds at once (a cache that grows by concatenation lives twice while it grows).
  std::function<double(const AttentionConfig&, const AttentionSizes&, double tokens)> decode_state_bytes;
  // Training: AttentionTrainingBytes of one module for a micro-batch.
  std::function<AttentionTrainingBytes(const AttentionConfig&, const AttentionSizes&, const AttentionBatch&)>
      training_bytes;
  // The export's settings of one module (config.json, docs/design.md section 8): the members
  // after "kind" that a reader needs to compute the kind. Null: none.
  std::function<void(const AttentionConfig&, json::Json&)> export_settings;
  // The recipe's part: which settings the kind reads, the rules between them, and which scale
  // its memory (settings.h). register_attention_kind passes it on to settings.h's list, which
  // the recipe reads without linking the layers; a built-in kind's part is in that list.
  AttentionKindSettings settings;
};

// Adds `entry`, or replaces the entry of the same name (and its settings).
void register_attention_kind(AttentionKindEntry entry);
// The entry named `name`; throws tarn::Error listing the known kinds when there is none.
const AttentionKindEntry& attention_kind_entry(const std::string& name);

// The entry of the kind `a` names.
const AttentionKindEntry& attention_kind_entry(const AttentionConfig& a);
// The estimates of the kind `a` names (0 where the kind gives none).
double attention_parameters(const AttentionConfig& a, const AttentionSizes& sizes);
double attention_buffer_values(const AttentionConfig& a, const AttentionSizes& sizes);
double attention_decode_state_bytes(const AttentionConfig& a, const AttentionSizes& sizes, double tokens);
AttentionTrainingBytes attention_training_bytes(const AttentionConfig& a, const AttentionSizes& sizes,
                                                const AttentionBatch& batch);
// {"kind": name, settings...} for the export.
json::Json attention_export_settings(const AttentionConfig& a);

// The layer of the kind `site.config()` names.
std::unique_ptr<AttentionKindLayer> make_attention_kind_layer(AttentionSite& site);

}  // namespace tarn
