#pragma once
// `tarn export`: a checkpoint as a folder other tools read: model.safetensors with HuggingFace
// BART names (the tied embedding stored once as model.shared.weight, as save_pretrained does;
// __metadata__ {"format": "pt"}), config.json with HF BartConfig fields plus tarn's attention
// settings under "tarn", the SentencePiece model, and, unless every layer is softmax,
// modeling_tarn_bart.py for transformers' trust_remote_code (docs/design.md section 8, "The
// export format"). The safetensors file is re-read and checked against the format's rules
// before the command reports success.
#include <string>

namespace tarn::app {

struct ExportResult {
  std::string dir;
  int64_t tensors = 0;
  int64_t parameters = 0;
  uint64_t bytes = 0;
};

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir);

}  // namespace tarn::app
