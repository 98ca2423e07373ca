// Softmax attention over chosen chunks of the keys (framework/ops/chunk_attention.h, routed
// cross-attention's selected read) against its definition in double and, through autograd,
// against central differences.
#include "framework/ops/chunk_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/common/gradcheck.h"

namespace tarn::testing {
namespace {

struct Case {
  int64_t batch, heads, nq, nk, d, chunk, top;
};

// Chunk picks per query, some -1 (none) and some repeated across queries; the last chunk of a
// 7-key source with chunk 3 holds one key.
std::vector<int32_t> picks(const Case& c) {
  const int64_t chunks = (c.nk + c.chunk - 1) / c.chunk;
  std::vector<int32_t> chosen;
  for (int64_t r = 0; r < c.batch * c.heads * c.nq; ++r)
    for (int64_t t = 0; t < c.top; ++t)
      chosen.push_back(t == c.top - 1 && r % 3 == 0 ? -1 : static_cast<int32_t>((r * 5 + t * 2) % chunks));
  // distinct chunks within a row, as the routed layer gives them
  for (int64_t r = 0; r < c.batch * c.heads * c.nq; ++r)
    for (int64_t t = 1; t < c.top; ++t)
      for (int64_t u = 0; u < t; ++u)
        if (chosen[r * c.top + t] == chosen[r * c.top + u]) chosen[r * c.top + t] = -1;
  return chosen;
}

// Key 1 of batch row 1 is padding; batch row 0 has none.
Tensor padding(const Case& c) {
  std::vector<float> p(static_cast<size_t>(c.batch * c.nk), 0.0f);
  if (c.batch > 1) p[c.nk + 1] = 1.0f;
  return Tensor::from_vector(p, {c.batch, c.nk});
}

std::vector<double> reference(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::vector<int32_t>& chosen, const Tensor& pad, double scale) {
  const std::vector<float> qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector(), pv = pad.to_vector();
  std::vector<double> out(qv.size(), 0.0);
  for (int64_t bh = 0; bh < c.batch * c.heads; ++bh)
    for (int64_t i = 0; i < c.nq; ++i) {
      std::vector<std::pair<int64_t, double>> keys;
      for (int64_t t = 0; t < c.top; ++t) {
        const int32_t ch = chosen[(bh * c.nq + i) * c.top + t];
        for (int64_t j = ch * c.chunk; ch >= 0 && j < std::min(c.nk, (ch + 1) * c.chunk); ++j) {
          if (pv[(bh / c.heads) * c.nk + j] != 0.0f) continue;
          double s = 0;
          for (int64_t e = 0; e < c.d; ++e) s += double(qv[(bh * c.nq + i) * c.d + e]) * kv[(bh * c.nk + j) * c.d + e];
          keys.emplace_back(j, s * scale);
        }
      }
      double m = -1e300, z = 0;
      for (const auto& [j, s] : keys) m = std::max(m, s);
      for (const auto& [j, s] : keys) z += std::exp(s - m);
      for (const auto& [j, s] : keys)
        for (int64_t e = 0; e < c.d; ++e)
          out[(bh * c.nq + i) * c.d + e] += std::exp(s - m) / z * vv[(bh * c.nk + j) * c.d + e];
    }
  return out;
}

const Case kCases[] = {{2, 3, 5, 7, 4, 3, 2}, {1, 2, 4, 16, 8, 4, 3}, {2, 1, 3, 5, 6, 1, 4}, {1, 1, 2, 9, 16, 9, 1}};

TEST(ChunkAttention, ForwardIsSoftmaxOverTheChosenChunksInDouble) {
  for (const Case& c : kCases) {
    const Tensor q = random_tensor({c.batch, c.heads, c.nq, c.d}, 1, -2, 2);
    const Tensor k = random_tensor({c.batch, c.heads, c.nk, c.d}, 2, -2, 2);
    const Tensor v = random_tensor({c.batch, c.heads, c.nk, c.d}, 3);
    const Tensor pad = padding(c);
    const std::vector<int32_t> chosen = picks(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    EXPECT_LT(relative_error(chunk_attention(q, k, v, chosen, c.chunk, c.top, pad, scale).to_vector(),
                             reference(c, q, k, v, chosen, pad, scale)),
              1e-5)
        << "nk " << c.nk << " chunk " << c.chunk << " top " << c.top;
  }
}

TEST(ChunkAttention, AQueryWithNoVisibleKeyGetsZeros) {
  const Case c{1, 1, 2, 4, 3, 2, 1};
  const Tensor q = random_tensor({1, 1, 2, 3}, 4), k = random_tensor({1, 1, 4, 3}, 5), v = random_tensor({1, 1, 4, 3}, 6);
  // query 0 reads chunk 1 (keys 2, 3), both padded; query 1 reads no chunk
  const Tensor pad = Tensor::from_vector({0, 0, 1, 1}, {1, 4});
  const Tensor out = chunk_attention(q, k, v, {1, -1}, c.chunk, c.top, pad, 1.0f);
  for (float x : out.to_vector()) EXPECT_EQ(x, 0.0f);
}

TEST(ChunkAttention, GradientsMatchFiniteDifferences) {
  for (const Case& c : kCases) {
    Tensor q = random_tensor({c.batch, c.heads, c.nq, c.d}, 7), k = random_tensor({c.batch, c.heads, c.nk, c.d}, 8),
           v = random_tensor({c.batch, c.heads, c.nk, c.d}, 9);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    const Tensor pad = padding(c);
    const std::vector<int32_t> chosen = picks(c);
    EXPECT_TRUE(gradients_match(
        [&](const std::vector<Tensor>& in) { return chunk_attention(in[0], in[1], in[2], chosen, c.chunk, c.top, pad, 0.7f); },
        {q, k, v}))
        << "nk " << c.nk << " chunk " << c.chunk << " top " << c.top;
  }
}

TEST(ChunkAttention, BadArgumentsAreRejected) {
  const Tensor q = random_tensor({1, 1, 2, 3}, 1), k = random_tensor({1, 1, 4, 3}, 2);
  EXPECT_ANY_THROW(chunk_attention(q, k, k, {0}, 2, 1, Tensor(), 1.0f));          // one pick for two queries
  EXPECT_ANY_THROW(chunk_attention(q, k, k, {0, 0}, 0, 1, Tensor(), 1.0f));       // a chunk of nothing
  EXPECT_ANY_THROW(chunk_attention(q, k, k, {0, 2}, 2, 1, Tensor(), 1.0f));       // 4 keys: chunks 0 and 1 only
  EXPECT_ANY_THROW(chunk_attention(q, k, k, {0, 0, 1, -1}, 2, 2, Tensor(), 1.0f));  // chunk 0 twice in a row
  EXPECT_ANY_THROW(chunk_attention(q, random_tensor({1, 1, 4, 2}, 3), k, {0, 0}, 2, 1, Tensor(), 1.0f));  // d differs
}

}  // namespace
}  // namespace tarn::testing
