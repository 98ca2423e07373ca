#include "app/hf_import.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "app/hf_config.h"
#include "data/byte_level_bpe.h"
#include "data/tokenizer.h"
#include "framework/config/config_error.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/log/log.h"
#include "layers/bart.h"
#include "app/checkpoint_state.h"
#include "app/progress.h"
#include "app/session.h"

namespace tarn::app {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data<char>(), b.data<char>(), a.nbytes()) == 0;
}

// The byte-level BPE of the folder, as tokenizers' tokenizer.json text.
std::string read_tokenizer(const std::string& dir, std::string* source) {
  const std::string tj = dir + "/tokenizer.json", vj = dir + "/vocab.json", mt = dir + "/merges.txt";
  if (exists(tj)) {
    *source = tj;
    return ByteLevelBpe::from_tokenizer_json(read_file(tj), tj).to_tokenizer_json();
  }
  if (exists(vj) && exists(mt)) {
    *source = vj + " + merges.txt";
    // BartTokenizer's specials; <mask> takes the space before it (lstrip), as in BART.
    return ByteLevelBpe::from_files(vj, mt, {{"<s>"}, {"<pad>"}, {"</s>"}, {"<unk>"}, {kMaskPiece, 0, true}})
        .to_tokenizer_json();
  }
  for (const char* spm : {"sentencepiece.bpe.model", "spiece.model", "spm.model", "source.spm"})
    TARN_CHECK(!exists(dir + "/" + spm), dir, "/", spm,
               ": a SentencePiece tokenizer (mBART's, T5's, Marian's): tarn imports BART's byte-level BPE only "
               "(tokenizer.json, or vocab.json + merges.txt)");
  TARN_CHECK(false, dir, ": no tokenizer: neither tokenizer.json nor vocab.json + merges.txt");
  return {};
}

}  // namespace

ImportResult import_hf_bart(const std::string& hf_dir, const std::string& out_dir) {
  ImportResult r;
  TARN_CHECK(exists(hf_dir), "import: ", hf_dir, ": no such folder");
  for (const char* f : {"config.json", "model.safetensors"})
    TARN_CHECK(exists(hf_dir + "/" + f), "import: ", hf_dir, "/", f, ": missing",
               std::string(f) == "model.safetensors" && exists(hf_dir + "/pytorch_model.bin")
                   ? " (the folder has pytorch_model.bin, a pickle tarn does not read: save it with "
                     "save_pretrained(..., safe_serialization=True))"
                   : "");
  const HfConfig cfg(hf_dir + "/config.json");

  check_hf_bart_config(cfg, r.not_applied);
  // generation_config.json (transformers >= 4.26 moves the generation defaults there).
  if (const std::string gpath = hf_dir + "/generation_config.json"; exists(gpath)) {
    check_hf_generation_config(HfConfig(gpath), r.not_applied);
  }

  // The tokenizer, written where the recipe points and loaded back as tarn loads it.
  std::filesystem::create_directories(out_dir);
  const std::string tok_path = out_dir + "/tokenizer.json";
  write_file_atomic(tok_path, read_tokenizer(hf_dir, &r.tokenizer_source));
  const Tokenizer tok = Tokenizer::load(tok_path);
  if (const json::Json* m = cfg.find("mask_token_id"); m && !m->is_null()) cfg.id_is("mask_token_id", tok.mask_id(), true);

  // The recipe: every size from config.json, softmax attention everywhere, HF's data layout.
  Recipe recipe;
  try {
    recipe = parse_recipe(hf_bart_recipe_yaml(cfg, out_dir, tok_path), hf_dir + "/config.json (as a tarn recipe)");
  } catch (const ConfigError& e) {
    throw Error(str_cat(cfg.path(), ": a size tarn cannot take: ", e.what()));
  }

  // The weights: HF's names are tarn's (docs/design.md section 3). Copies of the shared
  // embedding (tied output layer, per-stack embed_tokens) are checked equal and dropped.
  const std::string st_path = hf_dir + "/model.safetensors";
  SafetensorsFile f = load_safetensors(st_path);
  // A BartModel checkpoint (facebook/bart-base's architectures) names the base model's tensors
  // without "model."; HF adds its base_model_prefix when BartForConditionalGeneration loads it.
  if (!f.find("model.shared.weight") && f.find("shared.weight")) {
    for (auto& [name, t] : f.tensors)
      if (name != "final_logits_bias" && name != "lm_head.weight") name = "model." + name;
    r.notes.push_back("tensor names without \"model.\" (a BartModel checkpoint): read as BartForConditionalGeneration's");
  }
  const Tensor* shared = f.find("model.shared.weight");
  if (!shared) shared = f.find("model.encoder.embed_tokens.weight");
  TARN_CHECK(shared, st_path, ": no model.shared.weight (nor model.encoder.embed_tokens.weight)");
  const Tensor shared_copy = *shared;
  TensorList tensors;
  for (auto& [name, t] : f.tensors) {
    if (name == "lm_head.weight" || name == "model.encoder.embed_tokens.weight" ||
        name == "model.decoder.embed_tokens.weight") {
      TARN_CHECK(same_values(t, shared_copy), st_path, ": ", name,
                 " differs from model.shared.weight: tarn ties the output layer and both stacks' embeddings to one "
                 "matrix (untied embeddings cannot be represented)");
      r.dropped.push_back(name);
      if (!f.find("model.shared.weight") && name == "model.encoder.embed_tokens.weight")
        tensors.emplace_back("model.shared.weight", t);
      continue;
    }
    tensors.emplace_back(name, t);
  }
  if (!f.find("lm_head.weight") && !cfg.boolean("tie_word_embeddings", true))
    TARN_CHECK(false, cfg.path(), ": tie_word_embeddings = false but ", st_path,
               " has no lm_head.weight: HF would start the output layer at random");
  // config.json's sizes must not make a model far larger than the weights the file holds before
  // it is built: 20 million layers, say, would be allocated (and run out of memory) before
  // load_state_dict found the difference. The footprint is exact for softmax attention; a
  // smaller difference is left to load_state_dict, which names the tensor and both shapes.
  const BartConfig model_cfg = model_config(recipe, tok.vocab_size());
  double values = 0;
  for (const auto& [name, t] : tensors) values += static_cast<double>(t.numel());
  if (const double wanted = model_cfg.footprint().parameters(); wanted > 2 * values + 1e6)
    TARN_CHECK(false, cfg.path(), ": its sizes (vocabulary ", model_cfg.vocab_size, ", d_model ", model_cfg.d_model,
               ", encoder_layers ", model_cfg.encoder_layers, ", decoder_layers ", model_cfg.decoder_layers,
               ", ffn_dim ", model_cfg.ffn_dim, ", max_position_embeddings ", model_cfg.max_position_embeddings,
               ") make a model of ", wanted, " parameters, but ", st_path, " holds ", values,
               " values: config.json does not describe these weights");
  BartForConditionalGeneration model(model_cfg);
  // A BartModel checkpoint has no output bias: HF starts BartForConditionalGeneration's at zero.
  if (!f.find("final_logits_bias")) {
    for (const auto& [name, t] : state_dict(model))
      if (name == "final_logits_bias") tensors.emplace_back(name, Tensor::zeros(t.shape()));
    r.notes.push_back("no final_logits_bias in " + st_path + ": zeros, as HF starts it");
  }
  load_state_dict(model, tensors, /*strict=*/true, st_path);

  AdamWOptions ao;
  AdamW optimizer(model.named_parameters(), ao);
  save_training_checkpoint(out_dir, recipe, tok, model, optimizer, Progress{});
  r.checkpoint = checkpoint_dir(out_dir, 0);
  r.tensors = static_cast<int64_t>(tensors.size());
  for (const auto& [name, t] : tensors) r.parameters += t.numel();
  return r;
}

}  // namespace tarn::app
