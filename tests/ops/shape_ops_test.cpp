#include <gtest/gtest.h>

#include "framework/ops/shape_ops.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::gradients_match;
using testing::param;
using testing::random_tensor;
using testing::unravel;

// x permuted by `order`, element by element.
std::vector<float> permute_reference(const Tensor& x, const std::vector<int>& order) {
  std::vector<int64_t> dims;
  for (int a : order) dims.push_back(x.shape()[a]);
  const Shape out(dims);
  const std::vector<float> v = x.to_vector();
  std::vector<float> r(v.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const std::vector<int64_t> oi = unravel(i, out);
    std::vector<int64_t> xi(oi.size());
    for (size_t k = 0; k < order.size(); ++k) xi[order[k]] = oi[k];
    int64_t flat = 0;
    for (int d = 0; d < x.dim(); ++d) flat = flat * x.shape()[d] + xi[d];
    r[i] = v[flat];
  }
  return r;
}

TEST(ShapeOps, PermuteMatchesElementwiseReference) {
  struct Case {
    Shape shape;
    std::vector<int> order;
  };
  // Last axis kept (row copies), last axis moved (tiled transpose, edges not multiples of 32),
  // extent-1 axes, the attention (B,N,H,d) -> (B,H,N,d) split, and one above the parallel grain.
  for (const Case& c : {Case{{7, 13}, {1, 0}}, Case{{3, 5, 17}, {2, 0, 1}}, Case{{3, 5, 17}, {1, 0, 2}},
                        Case{{2, 1, 9, 4}, {3, 2, 1, 0}}, Case{{2, 7, 3, 5}, {0, 2, 1, 3}},
                        Case{{300, 257}, {1, 0}}, Case{{4, 33, 65}, {0, 2, 1}}, Case{{3, 5, 17}, {0, 1, 2}}}) {
    Tensor x = random_tensor(c.shape, 1);
    Tensor y = permute(x, c.order);
    EXPECT_EQ(y.to_vector(), permute_reference(x, c.order)) << c.shape.str();
  }
}

TEST(ShapeOps, TransposeSwapsTwoAxesAndItsBackwardTransposesBack) {
  Tensor x = param({3, 5, 17}, 2);
  Tensor y = transpose(x, -1, 0);
  EXPECT_EQ(y.shape(), Shape({17, 5, 3}));
  EXPECT_EQ(y.to_vector(), permute_reference(x, {2, 1, 0}));
  Tensor dy = random_tensor({17, 5, 3}, 3);
  y.backward(dy);
  EXPECT_EQ(x.grad().to_vector(), permute_reference(dy, {2, 1, 0}));
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return permute(in[0], {1, 2, 0}); },
                              {param({3, 5, 17}, 4)}));
}

TEST(ShapeOps, ReshapeIsAViewAndItsGradientHasTheInputShape) {
  Tensor x = param({3, 5, 17}, 5);
  Tensor y = reshape(x, {15, -1});
  EXPECT_EQ(y.shape(), Shape({15, 17}));
  EXPECT_TRUE(y.same_storage(x));
  y.backward(Tensor::ones({15, 17}));
  EXPECT_EQ(x.grad().shape(), x.shape());
  testing::expect_error([&] { reshape(x, {4, -1}); }, {"reshape", "(3, 5, 17)", "(4, -1)"});
  testing::expect_error([&] { reshape(x, {-1, -1}); }, {"reshape"});
}

TEST(ShapeOps, ConcatAndSliceAreInversesWithMatchingGradients) {
  Tensor a = param({3, 2, 17}, 6), b = param({3, 5, 17}, 7), c = param({3, 1, 17}, 8);
  Tensor y = concat({a, b, c}, 1);
  EXPECT_EQ(y.shape(), Shape({3, 8, 17}));
  EXPECT_EQ(slice(y, 1, 0, 2).to_vector(), a.to_vector());
  EXPECT_EQ(slice(y, 1, 2, 7).to_vector(), b.to_vector());
  EXPECT_EQ(slice(y, -2, 7, 8).to_vector(), c.to_vector());
  Tensor dy = random_tensor({3, 8, 17}, 9);
  y.backward(dy);
  EXPECT_EQ(a.grad().to_vector(), slice(dy, 1, 0, 2).to_vector());
  EXPECT_EQ(b.grad().to_vector(), slice(dy, 1, 2, 7).to_vector());
  EXPECT_EQ(c.grad().to_vector(), slice(dy, 1, 7, 8).to_vector());
}

TEST(ShapeOps, ConcatAndSliceBackwardMatchFiniteDifferences) {
  auto cat = [](const std::vector<Tensor>& in) { return concat({in[0], in[1]}, 0); };
  EXPECT_TRUE(gradients_match(cat, {param({2, 13}, 10), param({5, 13}, 11)}));
  auto cut = [](const std::vector<Tensor>& in) { return slice(in[0], 2, 3, 11); };
  EXPECT_TRUE(gradients_match(cut, {param({3, 5, 17}, 12)}));
}

TEST(ShapeOps, LargeConcatAndSliceAlongTheLastAxis) {
  Tensor a = random_tensor({300, 257}, 13), b = random_tensor({300, 100}, 14);
  Tensor y = concat({a, b}, -1);
  EXPECT_EQ(y.shape(), Shape({300, 357}));
  const std::vector<float> yv = y.to_vector(), av = a.to_vector(), bv = b.to_vector();
  for (int r = 0; r < 300; ++r) {
    for (int k = 0; k < 257; ++k) ASSERT_EQ(yv[r * 357 + k], av[r * 257 + k]);
    for (int k = 0; k < 100; ++k) ASSERT_EQ(yv[r * 357 + 257 + k], bv[r * 100 + k]);
  }
  EXPECT_EQ(slice(y, 1, 257, 357).to_vector(), bv);
}

TEST(ShapeOps, BadArgumentsThrowNamingTheOpAndShapes) {
  Tensor x = Tensor::zeros({3, 5, 17});
  testing::expect_error([&] { concat({x, Tensor::zeros({3, 4, 16})}, 1); }, {"concat", "(3, 5, 17)", "(3, 4, 16)"});
  testing::expect_error([&] { slice(x, 1, 2, 6); }, {"slice", "[2, 6)", "(3, 5, 17)"});
  testing::expect_error([&] { permute(x, {0, 0, 1}); }, {"permute", "(0, 0, 1)", "(3, 5, 17)"});
  testing::expect_error([&] { transpose(x, 0, 3); }, {"transpose", "(3, 5, 17)"});
}

}  // namespace
}  // namespace tarn
