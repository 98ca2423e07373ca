#include <gtest/gtest.h>

#include "framework/ops/nn.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::gradients_match;
using testing::param;
using testing::random_tensor;
using testing::relative_error;

TEST(Embedding, LookupCopiesTheNamedRows) {
  Tensor w = random_tensor({11, 5}, 1);
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 1};
  Tensor y = embedding(w, ids, {2, 3});
  EXPECT_EQ(y.shape(), Shape({2, 3, 5}));
  const std::vector<float> wv = w.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < ids.size(); ++i)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(yv[i * 5 + c], wv[ids[i] * 5 + c]);
}

TEST(Embedding, RepeatedIdsAccumulateTheirGradients) {
  // 300 positions over a vocabulary of 17 (every id repeats), width 257: crosses the parallel
  // threshold both ways.
  const int64_t n = 300, vocab = 17, dim = 257;
  Tensor u = random_tensor({n}, 2, 0.0f, 1.0f);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i % 5 == 0 ? 4 : static_cast<int32_t>(u.f32()[i] * (vocab - 1));
  Tensor w = param({vocab, dim}, 3);
  Tensor dy = random_tensor({n, dim}, 4);
  embedding(w, ids, {n}).backward(dy);
  std::vector<double> ref(vocab * dim, 0.0);
  const std::vector<float> g = dy.to_vector();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) ref[ids[i] * dim + c] += g[i * dim + c];
  EXPECT_LT(relative_error(w.grad().to_vector(), ref), 1e-6);
  // Id 16 never occurs: its row gets exactly zero.
  for (int64_t c = 0; c < dim; ++c) EXPECT_EQ(w.grad().to_vector()[16 * dim + c], 0.0f);
}

TEST(Embedding, GradientIsBitIdenticalForAnyThreadCount) {
  const int64_t n = 4000, vocab = 50, dim = 64;
  Tensor u = random_tensor({n}, 5, 0.0f, 1.0f);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(u.f32()[i] * vocab);
  Tensor w = random_tensor({vocab, dim}, 6), dy = random_tensor({n, dim}, 7);
  auto run = [&] {
    Tensor wl = w.clone().set_requires_grad(true);
    embedding(wl, ids, {n}).backward(dy);
    return wl.grad().to_vector();
  };
  EXPECT_EQ(testing::with_threads(1, run), testing::with_threads(2, run));
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const std::vector<int32_t> ids = {2, 5, 2, 0, 6, 2, 1};
  auto fn = [&](const std::vector<Tensor>& in) { return embedding(in[0], ids, {7}); };
  EXPECT_TRUE(gradients_match(fn, {param({7, 13}, 8)}));
}

TEST(Embedding, BadIdsThrowNamingTheIdAndVocabulary) {
  Tensor w = Tensor::zeros({10, 4});
  testing::expect_error([&] { embedding(w, {1, 10}, {2}); }, {"embedding", "id 10", "position 1", "(10, 4)"});
  testing::expect_error([&] { embedding(w, {-1}, {1}); }, {"embedding", "id -1"});
  testing::expect_error([&] { embedding(w, {1, 2, 3}, {2, 2}); }, {"embedding", "3 ids", "(2, 2)"});
}

}  // namespace
}  // namespace tarn
