// The causal depthwise convolution (framework/ops/causal_conv.h) against its definition in double
// and, through autograd, against central differences.
#include "framework/ops/causal_conv.h"

#include <gtest/gtest.h>

#include "tests/common/gradcheck.h"

namespace tarn::testing {
namespace {

TEST(CausalConv, ForwardMatchesTheSumOverEarlierTokensInDouble) {
  for (int64_t taps : {1, 3, 4, 9}) {  // 9 > n: the early rows see only what exists
    const Tensor x = random_tensor({3, 7, 70}, 1), w = random_tensor({taps, 70}, 2);
    const std::vector<float> xv = x.to_vector(), wv = w.to_vector();
    std::vector<double> want(xv.size(), 0.0);
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t t = 0; t < 7; ++t)
        for (int64_t c = 0; c < 70; ++c)
          for (int64_t i = 0; i < taps && i <= t; ++i)
            want[(b * 7 + t) * 70 + c] += double(wv[i * 70 + c]) * xv[(b * 7 + t - i) * 70 + c];
    EXPECT_LT(relative_error(causal_depthwise_conv(x, w).to_vector(), want), 1e-6) << "taps " << taps;
  }
}

TEST(CausalConv, GradientsMatchFiniteDifferences) {
  for (int64_t taps : {1, 4, 9}) {
    Tensor x = random_tensor({2, 6, 67}, 3), w = random_tensor({taps, 67}, 4);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return causal_depthwise_conv(in[0], in[1]); },
                                {x, w}))
        << "taps " << taps;
  }
}

TEST(CausalConv, LaterTokensDoNotReachEarlierOutputs) {
  Tensor x = random_tensor({1, 5, 8}, 5);
  const Tensor w = random_tensor({4, 8}, 6);
  const std::vector<float> before = causal_depthwise_conv(x, w).to_vector();
  x.f32()[4 * 8 + 3] += 1.0f;  // the last token
  const std::vector<float> after = causal_depthwise_conv(x, w).to_vector();
  for (int64_t i = 0; i < 4 * 8; ++i) EXPECT_EQ(before[i], after[i]) << i;
  EXPECT_NE(before[4 * 8 + 3], after[4 * 8 + 3]);
}

}  // namespace
}  // namespace tarn::testing
