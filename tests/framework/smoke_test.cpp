#include <gtest/gtest.h>
#include "framework/tensor.h"
TEST(Smoke, TensorBuilds) { EXPECT_EQ(tarn::Tensor::zeros({2, 3}).numel(), 6); }
