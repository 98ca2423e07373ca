#include <gtest/gtest.h>

#include <vector>

#include "framework/ops/matmul.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {
using testing::gradients_match;
using testing::random_tensor;
using testing::relative_error;

// Naive double reference for op(A) op(B) over a batch; b_batched=false shares B.
std::vector<double> reference(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t batch, int64_t M,
                              int64_t N, int64_t K, bool b_batched) {
  std::vector<double> c(static_cast<size_t>(batch * M * N), 0.0);
  const float* pa = a.f32();
  const float* pb = b.f32();
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = ta ? pa[i * M * K + k * M + m] : pa[i * M * K + m * K + k];
          const int64_t bo = b_batched ? i * K * N : 0;
          const double bv = tb ? pb[bo + n * K + k] : pb[bo + k * N + n];
          s += av * bv;
        }
        c[i * M * N + m * N + n] = s;
      }
  return c;
}

struct Case {
  bool ta, tb;
};

class MatmulTransposes : public ::testing::TestWithParam<Case> {};

TEST_P(MatmulTransposes, BatchedMatchesDoubleReferenceOnOddShapes) {
  const auto [ta, tb] = GetParam();
  const int64_t B = 3, M = 7, N = 13, K = 9;
  Tensor a = random_tensor(ta ? Shape{B, K, M} : Shape{B, M, K}, 1);
  Tensor b = random_tensor(tb ? Shape{B, N, K} : Shape{B, K, N}, 2);
  Tensor c = matmul(a, b, ta, tb);
  EXPECT_EQ(c.shape(), Shape({B, M, N}));
  EXPECT_LT(relative_error(c.to_vector(), reference(a, b, ta, tb, B, M, N, K, true)), 1e-6);
}

TEST_P(MatmulTransposes, SharedRightOperandMatchesReference) {
  const auto [ta, tb] = GetParam();
  const int64_t B = 4, M = 5, N = 11, K = 6;
  Tensor a = random_tensor(ta ? Shape{B, K, M} : Shape{B, M, K}, 3);
  Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 4);
  EXPECT_LT(relative_error(matmul(a, b, ta, tb).to_vector(), reference(a, b, ta, tb, B, M, N, K, false)), 1e-6);
}

TEST_P(MatmulTransposes, GradientsMatchFiniteDifferences) {
  const auto [ta, tb] = GetParam();
  Tensor a = random_tensor(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 5).set_requires_grad(true);
  Tensor b = random_tensor(tb ? Shape{2, 5, 4} : Shape{2, 4, 5}, 6).set_requires_grad(true);
  EXPECT_TRUE(gradients_match([=](const std::vector<Tensor>& in) { return matmul(in[0], in[1], ta, tb); }, {a, b}));
  Tensor w = random_tensor(tb ? Shape{5, 4} : Shape{4, 5}, 7).set_requires_grad(true);
  EXPECT_TRUE(gradients_match([=](const std::vector<Tensor>& in) { return matmul(in[0], in[1], ta, tb); }, {a, w}));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulTransposes,
                         ::testing::Values(Case{false, false}, Case{true, false}, Case{false, true}, Case{true, true}));

TEST(Matmul, LargeEnoughToThreadMatchesReference) {
  Tensor a = random_tensor({130, 257}, 8), b = random_tensor({257, 190}, 9);
  EXPECT_LT(relative_error(matmul(a, b).to_vector(), reference(a, b, false, false, 1, 130, 190, 257, true)), 1e-5);
}

TEST(Matmul, MismatchedInnerDimensionNamesBothShapes) {
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("(4, 5)"), std::string::npos) << m;
  }
}

TEST(Linear, MatchesXWtPlusBias) {
  Tensor x = random_tensor({2, 3, 5}, 10), w = random_tensor({4, 5}, 11), b = random_tensor({4}, 12);
  std::vector<double> ref = reference(x, w, false, true, 1, 6, 4, 5, false);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 4; ++j) ref[r * 4 + j] += b.f32()[j];
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.shape(), Shape({2, 3, 4}));
  EXPECT_LT(relative_error(y.to_vector(), ref), 1e-6);
}

TEST(Linear, GradientsMatchFiniteDifferencesWithAndWithoutBias) {
  Tensor x = random_tensor({3, 2, 5}, 13).set_requires_grad(true);
  Tensor w = random_tensor({7, 5}, 14).set_requires_grad(true);
  Tensor b = random_tensor({7}, 15).set_requires_grad(true);
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}));
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w}));
}

TEST(Linear, BiasGradientIsTheColumnSumOverManyRows) {
  Tensor x = random_tensor({600, 8}, 16), w = random_tensor({3, 8}, 17);
  Tensor b = Tensor::zeros({3}).set_requires_grad(true);
  linear(x, w, b).backward(Tensor::ones({600, 3}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{600, 600, 600}));
}

TEST(Linear, WrongInputWidthIsAClearError) {
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})), Error);
}

}  // namespace
}  // namespace tarn
