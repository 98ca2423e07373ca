#pragma once
// `tarn import`: a HuggingFace BART folder (config.json, model.safetensors, and vocab.json +
// merges.txt or tokenizer.json) as a tarn run folder that eval, generate, export and train use
// like any other (docs/design.md section 8, "Importing a HuggingFace BART"):
//   OUT/tokenizer.json   the byte-level BPE, in tokenizers' format
//   OUT/step_0/          a checkpoint: the weights, a softmax-attention recipe with every size
//                        from config.json and data.bos (HF's <s> ... </s>), AdamW at step 0
// Every config.json field is either mapped, checked against what tarn computes, or listed as
// not applied (generation defaults, classification labels, metadata); a field tarn cannot
// represent, or one it does not know, is refused naming it and its value.
#include <string>
#include <vector>

namespace tarn::app {

struct ImportResult {
  std::string checkpoint;                // OUT/step_0
  std::string tokenizer_source;          // tokenizer.json, or vocab.json + merges.txt
  int64_t tensors = 0;
  int64_t parameters = 0;
  std::vector<std::string> not_applied;  // "num_beams=4", ...: fields that do not change the model
  std::vector<std::string> dropped;      // tensors that are copies of model.shared.weight
  std::vector<std::string> notes;        // how the weights were read where HF's loader adapts them
};

ImportResult import_hf_bart(const std::string& hf_dir, const std::string& out_dir);

}  // namespace tarn::app
