#pragma once
// config.json (and generation_config.json) of a HuggingFace BART folder, as `tarn import` reads
// it (app/hf_import.h; docs/design.md section 8, "Importing a HuggingFace BART"): every field is
// mapped, checked against what tarn computes, or listed as not applied; a field tarn cannot
// represent, or one it does not know, is refused with tarn::Error naming the file, the field and
// its value. Apart from the rest of the import (weights, tokenizer, checkpoint) so that
// fuzz/hf_config_fuzzer.cpp reaches it without a model.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/io/json.h"

namespace tarn::app {

// A config file read field by field; each refusal names the file, the field and its value.
class HfConfig {
 public:
  explicit HfConfig(const std::string& path);                 // reads the file
  HfConfig(std::string_view text, const std::string& path);  // `text` is the file's content
  const json::Json* find(const std::string& key) const { return json::find(root_, key); }
  const json::Json& root() const { return root_; }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const;
  int64_t integer(const std::string& key) const;  // required, a non-negative integer
  double number(const std::string& key, double absent) const;
  bool boolean(const std::string& key, bool absent) const;
  // An id field that must be `want` (tarn's fixed special ids) or, when `null_ok`, absent/null.
  void id_is(const std::string& key, int64_t want, bool null_ok) const;
  // The fields listed as not applied go to `not_applied` ("num_beams=4"); returns the unknown ones.
  std::vector<std::string> unknown_and_not_applied(std::vector<std::string>& not_applied) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  json::Json root_;
};

// The special ids a config names (config.json, generation_config.json) must be tarn's fixed
// ones or null; config.json must name pad_token_id.
void check_special_ids(const HfConfig& c, bool pad_may_be_null);

// config.json's fields that change what the model computes: refused unless tarn computes the
// same; unknown fields refused; the fields that change nothing appended to `not_applied`. The
// sizes are read (and refused when missing) by hf_bart_recipe_yaml, mask_token_id by the import
// once it has the tokenizer.
void check_hf_bart_config(const HfConfig& cfg, std::vector<std::string>& not_applied);

// generation_config.json: its special ids checked, its other fields appended to `not_applied`.
void check_hf_generation_config(const HfConfig& gen, std::vector<std::string>& not_applied);

// The tarn recipe (YAML) of the imported model: every size from config.json, softmax attention
// everywhere, HF's data layout, the tokenizer at `tokenizer_path`, checkpoints in `out_dir`.
std::string hf_bart_recipe_yaml(const HfConfig& cfg, const std::string& out_dir, const std::string& tokenizer_path);

}  // namespace tarn::app
