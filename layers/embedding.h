#pragma once
// Token embeddings and BART's learned positional embeddings.
#include <cstdint>
#include <vector>

#include "framework/module.h"
#include "layers/param_init.h"

namespace tarn {

// A (num_embeddings, dim) table. With a padding_idx, that row starts at zero as in HF (its
// gradient is not masked: BART ties this table to the output projection, which trains it).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, ParamInit& init, int64_t padding_idx = -1);

  // ids: values in [0, num_embeddings), laid out as ids_shape -> (ids_shape..., dim).
  Tensor forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const;

  int64_t num_embeddings() const { return weight.size(0); }
  int64_t dim() const { return weight.size(1); }

  Tensor weight;
};

// HF's BartLearnedPositionalEmbedding: a table of max_positions + 2 rows where position p
// (counted from 0 at the first token, continuing past_length tokens into a decode) uses row
// p + 2. The offset is a fairseq legacy that HF keeps so that BART checkpoints load.
class LearnedPositionalEmbedding : public Module {
 public:
  static constexpr int64_t kOffset = 2;

  LearnedPositionalEmbedding(int64_t max_positions, int64_t dim, ParamInit& init);

  // Positions past_length .. past_length + length - 1 -> (length, dim); broadcasts over batch.
  Tensor forward(int64_t length, int64_t past_length = 0) const;

  int64_t max_positions() const { return weight.size(0) - kOffset; }
  int64_t dim() const { return weight.size(1); }

  Tensor weight;  // (max_positions + 2, dim)
};

}  // namespace tarn
