// Routed cross-attention's chunk ops (framework/ops/chunk_attention.h) on the CPU: the chunks'
// means and the choice of the best chunks against their definitions, and softmax attention over
// the chosen chunks' keys against its definition in double; those with a gradient, through
// autograd, against central differences. tests/cuda/conformance_chunk_attention_test.cpp holds
// the CUDA kernels to these CPU kernels.
#include "framework/ops/chunk_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "framework/ops/elementwise.h"
#include "kernels/chunk_attention.h"
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

// The picks as the ops take them: (B, H, Nq, top) f32 integers.
Tensor as_tensor(const std::vector<int32_t>& chosen, int64_t batch, int64_t heads, int64_t nq, int64_t top) {
  return Tensor::from_vector(std::vector<float>(chosen.begin(), chosen.end()), {batch, heads, nq, top});
}
Tensor as_tensor(const std::vector<int32_t>& chosen, const Case& c) {
  return as_tensor(chosen, c.batch, c.heads, c.nq, c.top);
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
    EXPECT_LT(relative_error(chunk_attention(q, k, v, as_tensor(chosen, c), c.chunk, pad, scale).to_vector(),
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
  const Tensor out = chunk_attention(q, k, v, as_tensor({1, -1}, c), c.chunk, pad, 1.0f);
  for (float x : out.to_vector()) EXPECT_EQ(x, 0.0f);
}

TEST(ChunkAttention, GradientsMatchFiniteDifferences) {
  for (const Case& c : kCases) {
    Tensor q = random_tensor({c.batch, c.heads, c.nq, c.d}, 7), k = random_tensor({c.batch, c.heads, c.nk, c.d}, 8),
           v = random_tensor({c.batch, c.heads, c.nk, c.d}, 9);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    const Tensor pad = padding(c);
    const Tensor chosen = as_tensor(picks(c), c);
    EXPECT_TRUE(gradients_match(
        [&](const std::vector<Tensor>& in) { return chunk_attention(in[0], in[1], in[2], chosen, c.chunk, pad, 0.7f); },
        {q, k, v}))
        << "nk " << c.nk << " chunk " << c.chunk << " top " << c.top;
  }
}

// The CPU kernels cut a head's queries into blocks and a chunk's queries into GEMM tiles
// (kernels::cpu::ChunkTuning). Cut to one or a few queries, every boundary is crossed and the
// results stay what the default cut gives: the choice exactly (each score is the same sum in
// the same order), the read and its gradients to rounding (dk and dv add a block at a time).
TEST(ChunkAttention, SmallBlocksAndTilesGiveWhatTheDefaultCutGives) {
  const Case c{2, 2, 37, 29, 6, 4, 3};  // 8 chunks, the last of 1 key
  const Tensor pad = padding(c);
  const std::vector<int32_t> chosen = picks(c);
  const Tensor q = random_tensor({c.batch, c.heads, c.nq, c.d}, 21, -2, 2);
  const Tensor k = random_tensor({c.batch, c.heads, c.nk, c.d}, 22, -2, 2);
  const Tensor v = random_tensor({c.batch, c.heads, c.nk, c.d}, 23);
  const Tensor dout = random_tensor({c.batch, c.heads, c.nq, c.d}, 24);
  struct Results {
    std::vector<float> out, dq, dk, dv, within;
  };
  auto run = [&]() {
    Tensor qg = q.detach(), kg = k.detach(), vg = v.detach();
    for (Tensor* t : {&qg, &kg, &vg}) t->set_requires_grad(true);
    const ChunkReadAndChoice both = chunk_attention_choose(qg, kg, vg, as_tensor(chosen, c), c.chunk, pad, 0.4f, 5);
    both.read.backward(dout);
    return Results{both.read.to_vector(), qg.grad().to_vector(), kg.grad().to_vector(), vg.grad().to_vector(),
                   both.picked.to_vector()};
  };
  auto as_double = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const Results whole = run();
  // a block a query; blocks of 4 queries (100 / (top 3 x 8)) in tiles of 1; one block in tiles of 2
  for (const kernels::cpu::ChunkTuning cut : {kernels::cpu::ChunkTuning{1, 1}, kernels::cpu::ChunkTuning{100, 1},
                                              kernels::cpu::ChunkTuning{int64_t{1} << 20, 2}}) {
    const kernels::cpu::ChunkTuning before = kernels::cpu::set_chunk_tuning(cut);
    const Results got = run();
    kernels::cpu::set_chunk_tuning(before);
    const std::string what = "scores " + std::to_string(cut.score_floats) + ", tiles " + std::to_string(cut.tile_rows);
    EXPECT_EQ(got.within, whole.within) << what;
    EXPECT_LT(relative_error(got.out, as_double(whole.out)), 1e-6) << what;
    EXPECT_LT(relative_error(got.dq, as_double(whole.dq)), 1e-6) << what;
    EXPECT_LT(relative_error(got.dk, as_double(whole.dk)), 1e-6) << what;
    EXPECT_LT(relative_error(got.dv, as_double(whole.dv)), 1e-6) << what;
  }
}

TEST(ChunkAttention, BadArgumentsAreRejected) {
  const Tensor q = random_tensor({1, 1, 2, 3}, 1), k = random_tensor({1, 1, 4, 3}, 2);
  auto picks_of = [](const std::vector<int32_t>& p, int64_t nq, int64_t top) { return as_tensor(p, 1, 1, nq, top); };
  EXPECT_ANY_THROW(chunk_attention(q, k, k, picks_of({0}, 1, 1), 2, Tensor(), 1.0f));         // one pick for two queries
  EXPECT_ANY_THROW(chunk_attention(q, k, k, picks_of({0, 0}, 2, 1), 0, Tensor(), 1.0f));      // a chunk of nothing
  EXPECT_ANY_THROW(chunk_attention(q, k, k, picks_of({0, 2}, 2, 1), 2, Tensor(), 1.0f));      // 4 keys: chunks 0 and 1 only
  EXPECT_ANY_THROW(chunk_attention(q, k, k, picks_of({0, 0, 1, -1}, 2, 2), 2, Tensor(), 1.0f));  // chunk 0 twice in a row
  EXPECT_ANY_THROW(chunk_attention(q, k, k, as_tensor({0, 1}, 1, 1, 2, 1) * 0.5f, 2, Tensor(), 1.0f));  // chunk 0.5
  EXPECT_ANY_THROW(chunk_attention(q, random_tensor({1, 1, 4, 2}, 3), k, picks_of({0, 0}, 2, 1), 2, Tensor(), 1.0f));  // d differs
}

// The mean of each chunk's visible rows in double, and which chunks hold padding only.
TEST(ChunkMean, IsTheMeanOfEachChunksVisibleRows) {
  for (const Case& c : kCases) {
    const Tensor x = random_tensor({c.batch, c.heads, c.nk, c.d}, 11);
    std::vector<float> p(static_cast<size_t>(c.batch * c.nk), 0.0f);
    if (c.batch > 1)  // batch row 1: key 1 padded, and the whole last chunk
      for (int64_t j = 0; j < c.nk; ++j) p[c.nk + j] = j == 1 || j >= (c.nk - 1) / c.chunk * c.chunk;
    const Tensor pad = Tensor::from_vector(p, {c.batch, c.nk});
    const ChunkMeans got = chunk_mean(x, pad, c.chunk);
    const int64_t chunks = (c.nk + c.chunk - 1) / c.chunk;
    ASSERT_EQ(got.mean.shape(), Shape({c.batch, c.heads, chunks, c.d}));
    ASSERT_EQ(got.empty.shape(), Shape({c.batch, chunks}));
    const std::vector<float> xv = x.to_vector(), mean = got.mean.to_vector(), empty = got.empty.to_vector();
    for (int64_t bh = 0; bh < c.batch * c.heads; ++bh)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t b = bh / c.heads;
        std::vector<double> sum(static_cast<size_t>(c.d), 0.0);
        int64_t kept = 0;
        for (int64_t j = ch * c.chunk; j < std::min(c.nk, (ch + 1) * c.chunk); ++j) {
          if (p[b * c.nk + j] != 0.0f) continue;
          ++kept;
          for (int64_t e = 0; e < c.d; ++e) sum[e] += xv[(bh * c.nk + j) * c.d + e];
        }
        EXPECT_EQ(empty[b * chunks + ch], kept == 0 ? 1.0f : 0.0f) << "batch " << b << " chunk " << ch;
        for (int64_t e = 0; e < c.d; ++e)
          EXPECT_NEAR(mean[(bh * chunks + ch) * c.d + e], kept ? sum[e] / kept : 0.0, 1e-6) << "chunk " << ch;
      }
  }
}

TEST(ChunkMean, GradientsMatchFiniteDifferences) {
  for (const Case& c : kCases) {
    Tensor x = random_tensor({c.batch, c.heads, c.nk, c.d}, 12);
    x.set_requires_grad(true);
    const Tensor pad = padding(c);
    EXPECT_TRUE(gradients_match([&](const std::vector<Tensor>& in) { return chunk_mean(in[0], pad, c.chunk).mean; }, {x}))
        << "nk " << c.nk << " chunk " << c.chunk;
  }
}

// Highest score first, equal scores to the earlier chunk, flagged chunks never, -1 past the
// chunks there are: against a stable sort of each row.
TEST(ChunkChoose, PicksTheBestChunksInOrder) {
  const int64_t batch = 2, heads = 2, nq = 3, chunks = 6;
  std::vector<float> scores(static_cast<size_t>(batch * heads * nq * chunks));
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>((i * 7) % 5);  // many ties
  // batch row 1: chunks 0, 2, 3, 4 and 5 of padding only; one chunk left
  const std::vector<float> empty = {0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1};
  for (int64_t top : {1, 3, 6}) {
    const std::vector<float> got =
        chunk_choose(Tensor::from_vector(scores, {batch, heads, nq, chunks}), Tensor::from_vector(empty, {batch, chunks}),
                     top)
            .to_vector();
    ASSERT_EQ(got.size(), static_cast<size_t>(batch * heads * nq * top));
    for (int64_t r = 0; r < batch * heads * nq; ++r) {
      std::vector<int32_t> order;
      for (int32_t ch = 0; ch < chunks; ++ch)
        if (empty[(r / (heads * nq)) * chunks + ch] == 0.0f) order.push_back(ch);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return scores[r * chunks + a] > scores[r * chunks + b]; });
      for (int64_t t = 0; t < top; ++t)
        EXPECT_EQ(got[r * top + t], t < static_cast<int64_t>(order.size()) ? order[t] : -1)
            << "row " << r << " top " << top << " pick " << t;
    }
  }
  EXPECT_ANY_THROW(chunk_choose(Tensor::from_vector(scores, {batch, heads, nq, chunks}), Tensor(), 7));  // top > chunks
}

// One level down a tree: the candidates are the visible rows of the parent chunks, in whatever
// order the parents come; the best `pick` of them by q·k, ties to the lower row, -1 past them.
// The read beside the choice is chunk_attention's, bit for bit.
TEST(ChunkAttentionChoose, PicksTheBestChildrenOfTheParents) {
  const Case c{2, 2, 4, 11, 3, 3, 3};  // 4 chunks of k's 11 rows, the last of 2
  const Tensor q = random_tensor({c.batch, c.heads, c.nq, c.d}, 5, -2, 2);
  std::vector<float> kv = random_tensor({c.batch, c.heads, c.nk, c.d}, 6, -2, 2).to_vector();
  // rows 2 and 4 of head 0 equal, rows 9 and 10 (chunk 3) too: ties, whichever parent comes first
  for (int64_t e = 0; e < c.d; ++e) kv[4 * c.d + e] = kv[2 * c.d + e];
  for (int64_t e = 0; e < c.d; ++e) kv[9 * c.d + e] = kv[10 * c.d + e];
  const Tensor k = Tensor::from_vector(kv, {c.batch, c.heads, c.nk, c.d});
  const Tensor v = random_tensor({c.batch, c.heads, c.nk, c.d}, 7);
  const Tensor pad = padding(c);  // row 1 of batch row 1 never
  std::vector<float> parents;
  for (int64_t r = 0; r < c.batch * c.heads * c.nq; ++r) {
    const std::vector<std::vector<float>> rows = {{3, 0, -1}, {1, -1, 3}, {2, 1, 0}, {-1, -1, -1}};
    for (float p : rows[r % 4]) parents.push_back(p);
  }
  const float scale = 0.7f;
  const std::vector<float> qv = q.to_vector();
  const std::vector<float> pv = pad.to_vector();
  const Tensor parent_tensor = Tensor::from_vector(parents, {c.batch, c.heads, c.nq, c.top});
  const std::vector<float> read = chunk_attention(q, k, v, parent_tensor, c.chunk, pad, scale).to_vector();
  for (int64_t pick : {1, 2, 5, 9}) {
    const ChunkReadAndChoice both = chunk_attention_choose(q, k, v, parent_tensor, c.chunk, pad, scale, pick);
    EXPECT_EQ(both.read.to_vector(), read) << "pick " << pick;
    const std::vector<float> got = both.picked.to_vector();
    ASSERT_EQ(got.size(), static_cast<size_t>(c.batch * c.heads * c.nq * pick));
    for (int64_t r = 0; r < c.batch * c.heads * c.nq; ++r) {
      const int64_t bh = r / c.nq, b = bh / c.heads;
      std::vector<std::pair<double, int64_t>> want;  // (-score, row): sorted, the best first
      for (int64_t t = 0; t < c.top; ++t) {
        const int64_t p = static_cast<int64_t>(parents[r * c.top + t]);
        for (int64_t j = p * c.chunk; p >= 0 && j < std::min(c.nk, (p + 1) * c.chunk); ++j) {
          if (pv[b * c.nk + j] != 0.0f) continue;
          float s = 0.0f;
          for (int64_t e = 0; e < c.d; ++e) s += qv[r * c.d + e] * kv[(bh * c.nk + j) * c.d + e];
          want.emplace_back(-static_cast<double>(scale * s), j);
        }
      }
      std::sort(want.begin(), want.end());
      for (int64_t t = 0; t < pick; ++t)
        EXPECT_EQ(got[r * pick + t], t < static_cast<int64_t>(want.size()) ? want[t].second : -1)
            << "row " << r << " pick " << pick << " slot " << t;
    }
  }
  // parents out of range, a q that does not match k, and nothing to pick
  EXPECT_ANY_THROW(chunk_attention_choose(q, k, v, Tensor::full({c.batch, c.heads, c.nq, c.top}, 4.0f), c.chunk, pad,
                                          scale, 2));
  EXPECT_ANY_THROW(chunk_attention_choose(Tensor::zeros({c.batch, c.heads, c.nq, c.d + 1}), k, v, parent_tensor,
                                          c.chunk, pad, scale, 2));
  EXPECT_ANY_THROW(chunk_attention_choose(q, k, v, parent_tensor, c.chunk, pad, scale, 0));
}

}  // namespace
}  // namespace tarn::testing
