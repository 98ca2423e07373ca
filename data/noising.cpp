#include "data/noising.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/check.h"

namespace tarn {
namespace {

// Knuth's method needs exp(-lambda) well above the smallest double and ~lambda draws.
constexpr double kMaxLambda = 50.0;

template <typename T>
void shuffle(std::vector<T>& v, Philox& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(static_cast<uint32_t>(i))]);
}

// floor(x) or floor(x) + 1 with probability frac(x): unbiased integer count.
size_t random_round(double x, Philox& rng) {
  const double whole = std::floor(x);
  return static_cast<size_t>(whole) + (rng.uniform() <= x - whole ? 1 : 0);  // uniform() > 0
}

}  // namespace

void NoiseConfig::validate() const {
  TARN_CHECK(mask_ratio >= 0.0 && mask_ratio <= 1.0, "noise.mask_ratio: expected a value in [0, 1], got ",
             mask_ratio);
  TARN_CHECK(poisson_lambda > 0.0 && poisson_lambda <= kMaxLambda,
             "noise.poisson_lambda: expected a value in (0, ", kMaxLambda, "], got ", poisson_lambda);
  TARN_CHECK(delete_ratio >= 0.0 && delete_ratio < 1.0, "noise.delete_ratio: expected a value in [0, 1), got ",
             delete_ratio);
}

int sample_poisson(Philox& rng, double lambda) {
  const double threshold = std::exp(-lambda);
  int k = 0;
  double product = rng.uniform();
  while (product > threshold) {
    ++k;
    product *= rng.uniform();
  }
  return k;
}

std::vector<int32_t> infill_spans(IdSpan tokens, double mask_ratio, double lambda, int32_t mask_id, Philox& rng) {
  const size_t n = tokens.size();
  const size_t to_mask = std::min(n, random_round(mask_ratio * static_cast<double>(n), rng));
  if (to_mask == 0) return tokens.to_vector();

  // Span lengths until they cover to_mask tokens; zeros are insertions. The last span is cut
  // so the total is exact (it stays >= 1 because we stop as soon as the sum reaches to_mask).
  std::vector<size_t> spans;
  size_t covered = 0;
  while (covered < to_mask) {
    const size_t len = std::min<size_t>(sample_poisson(rng, lambda), to_mask - covered);
    spans.push_back(len);
    covered += len;
  }

  // Place spans in the gaps around the kept tokens: gap g precedes kept token g, gap `kept`
  // follows the last one. Distinct gaps (a partial Fisher-Yates draw) when possible.
  const size_t kept = n - to_mask, gaps = kept + 1;
  std::vector<std::pair<size_t, size_t>> placed(spans.size());  // (gap, length)
  if (spans.size() <= gaps) {
    std::vector<size_t> order(gaps);
    for (size_t g = 0; g < gaps; ++g) order[g] = g;
    for (size_t j = 0; j < spans.size(); ++j) {
      std::swap(order[j], order[j + rng.below(static_cast<uint32_t>(gaps - j))]);
      placed[j] = {order[j], spans[j]};
    }
  } else {
    for (size_t j = 0; j < spans.size(); ++j) placed[j] = {rng.below(static_cast<uint32_t>(gaps)), spans[j]};
  }
  std::stable_sort(placed.begin(), placed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  std::vector<int32_t> out;
  out.reserve(kept + spans.size());
  size_t next = 0, p = 0;  // next input token, next placed span
  for (size_t g = 0; g < gaps; ++g) {
    for (; p < placed.size() && placed[p].first == g; ++p) {
      out.push_back(mask_id);
      next += placed[p].second;
    }
    if (g < kept) out.push_back(tokens[next++]);
  }
  return out;
}

std::vector<int32_t> delete_tokens(const std::vector<int32_t>& tokens, double ratio, int32_t mask_id, Philox& rng) {
  std::vector<int32_t> out;
  out.reserve(tokens.size());
  for (int32_t t : tokens)
    if (t == mask_id || rng.uniform() > ratio) out.push_back(t);
  return out;
}

std::vector<int32_t> noise_example(const std::vector<IdSpan>& sentences, const NoiseConfig& config, int32_t mask_id,
                                   Philox& rng) {
  std::vector<IdSpan> order = sentences;
  if (config.permute_sentences && order.size() > 1) shuffle(order, rng);
  std::vector<int32_t> text;
  for (const auto& s : order) text.insert(text.end(), s.begin(), s.end());
  std::vector<int32_t> out =
      infill_spans({text.data(), text.size()}, config.mask_ratio, config.poisson_lambda, mask_id, rng);
  if (config.delete_ratio > 0.0) out = delete_tokens(out, config.delete_ratio, mask_id, rng);
  return out;
}

}  // namespace tarn
