#pragma once
// BART's denoising noise (Lewis et al. 2020, section 2.2) for one example: sentence
// permutation, text infilling and optional token deletion, in that order (fairseq's order).
// All randomness comes from the Philox generator passed in; the dataset keys it by
// (seed, epoch, example index), so noise does not depend on batch order and resumes exactly.
#include <cstdint>
#include <vector>

#include "data/ragged.h"
#include "framework/rng.h"

namespace tarn {

struct NoiseConfig {
  double mask_ratio = 0.3;        // fraction of tokens removed by text infilling
  double poisson_lambda = 3.0;    // infilling span lengths ~ Poisson(lambda)
  bool permute_sentences = true;  // shuffle the sentences (original lines) of a packed example
  double delete_ratio = 0.0;      // token deletion: each unmasked token dropped with this probability

  // Throws tarn::Error naming the offending field ("noise.mask_ratio: ...").
  void validate() const;
};

// A Poisson(lambda) sample by Knuth's product of uniforms: exact, and cheap for lambda ~ 3.
int sample_poisson(Philox& rng, double lambda);

// Text infilling. round(mask_ratio * n) tokens (rounded up or down at random so the expected
// ratio is exact) are covered by spans with Poisson(lambda) lengths, the last one cut to fit;
// each span becomes a single mask_id, and a span of length 0 inserts a mask_id. Spans sit in
// distinct gaps between kept tokens whenever there are enough gaps (so they never merge),
// otherwise some share a gap and their masks are adjacent.
std::vector<int32_t> infill_spans(IdSpan tokens, double mask_ratio, double lambda, int32_t mask_id, Philox& rng);

// Token deletion: drops each token other than mask_id with probability `ratio`.
std::vector<int32_t> delete_tokens(const std::vector<int32_t>& tokens, double ratio, int32_t mask_id, Philox& rng);

// The whole noise for one example whose sentences are `sentences` (one for a single line).
// Returns the noised token ids without </s>.
std::vector<int32_t> noise_example(const std::vector<IdSpan>& sentences, const NoiseConfig& config, int32_t mask_id,
                                   Philox& rng);

}  // namespace tarn
