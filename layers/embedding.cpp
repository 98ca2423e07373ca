#include "layers/embedding.h"

#include "framework/ops/nn.h"
#include "framework/ops/shape_ops.h"

namespace tarn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, ParamInit& init, int64_t padding_idx) {
  weight = init.normal({num_embeddings, dim});
  if (padding_idx >= 0) {
    TARN_ASSERT(padding_idx < num_embeddings, "Embedding: padding_idx ", padding_idx, " outside [0, ",
                num_embeddings, ")");
    weight.narrow0(padding_idx, padding_idx + 1).fill(0.0f);
  }
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const {
  TARN_ASSERT(static_cast<int64_t>(ids.size()) == ids_shape.numel(), "Embedding: ", ids.size(),
              " ids do not fill shape ", ids_shape.str());
  return embedding(weight, ids, ids_shape);
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_positions, int64_t dim, ParamInit& init) {
  weight = init.normal({max_positions + kOffset, dim});
  register_parameter("weight", weight);
}

Tensor LearnedPositionalEmbedding::forward(int64_t length, int64_t past_length) const {
  TARN_ASSERT(past_length >= 0 && length >= 0 && past_length + length <= max_positions(),
              "positional embedding: positions [", past_length, ", ", past_length + length,
              ") exceed max_position_embeddings = ", max_positions());
  // Rows past_length + kOffset onwards, one each: a slice (nothing goes up to a device), the
  // bits of embedding() with those ids both ways (its backward adds each row's gradient to 0).
  return slice(weight, 0, past_length + kOffset, past_length + kOffset + length);
}

}  // namespace tarn
