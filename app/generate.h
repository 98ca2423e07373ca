#pragma once
// Decoding for `tarn generate` and `tarn denoise`: greedy and beam search over the model's
// incremental decoder (linear attention: the recurrent state, O(1) per token; softmax: the
// key/value cache).
#include <cstdint>
#include <vector>

#include "layers/bart.h"

namespace tarn::app {

struct GenerateOptions {
  int beam = 1;             // 1 = greedy
  int64_t max_length = 128;  // generated tokens, </s> included
  double length_penalty = 1.0;  // beam: hypotheses ranked by log p / length^penalty
  // n > 0: no output repeats an n-gram it already holds (fairseq's --no-repeat-ngram-size,
  // HuggingFace's no_repeat_ngram_size); a half-trained model otherwise loops on a phrase.
  int no_repeat_ngram = 0;
  // HuggingFace BART's forced_bos_token_id and forced_eos_token_id: the first token is <s>, and
  // an output that reaches max_length ends with </s> (its last token). The data.bos recipes'.
  bool forced_bos = false;
  bool forced_eos = false;
};

// The tokens that would complete an n-gram `tokens` already holds: those that followed an
// earlier occurrence of its last n-1 tokens (for n = 1, every token in it). Empty for n <= 0.
std::vector<int32_t> repeated_ngram_completions(const std::vector<int32_t>& tokens, int n);

// A lower bound on the bytes decoding `rows` hypotheses together (the batch for greedy, the beam
// for beam search) holds beside the model's weights, for a source of `source_len` tokens and up
// to `max_length` generated ones: the encoder's output, each decoder layer's state (linear
// attention: a features x (d_head + 1) matrix per head, whatever the length; delta and gated: a
// d_head x d_head matrix per head and the convolutions' conv_size - 1 rows of tails; softmax:
// keys and values of every token so far, copied once as the cache grows; hybrid: those of the
// last `window` tokens) and the logits. Sums in doubles; a sum that is not finite is refused.
double decoding_memory_bytes(const BartConfig& c, int64_t rows, int64_t source_len, int64_t max_length);

// Refuses (tarn::Error, exit code 2) decoding whose decoding_memory_bytes exceed
// `budget_bytes`, naming --beam and --max-length and what the budget is.
void check_decoding_memory(const BartConfig& c, int64_t rows, int64_t source_len, const GenerateOptions& options,
                           double budget_bytes);

// Each source (token ids ending with </s>) -> generated ids without the leading </s> and
// without the final </s>. Checks the decoding memory against this machine's first.
std::vector<std::vector<int32_t>> generate(const BartForConditionalGeneration& model,
                                           const std::vector<std::vector<int32_t>>& sources,
                                           const GenerateOptions& options);

}  // namespace tarn::app
