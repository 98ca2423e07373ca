#include <gtest/gtest.h>

#include "framework/tensor.h"

namespace tarn {
namespace {

TEST(Tensor, ViewsShareStorageAndCopiesDoNot) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = t.view({3, 2});
  EXPECT_TRUE(v.same_storage(t));
  v.f32()[0] = 42;
  EXPECT_EQ(t.f32()[0], 42);
  Tensor c = t.clone();
  c.f32()[1] = -1;
  EXPECT_EQ(t.f32()[1], 1);
}

TEST(Tensor, ViewInfersOneExtent) {
  Tensor t = Tensor::zeros({4, 6});
  EXPECT_EQ(t.view({-1, 3}).shape(), Shape({8, 3}));
  EXPECT_THROW(t.view({-1, -1}), Error);
}

TEST(Tensor, ViewOfWrongSizeNamesBothShapes) {
  Tensor t = Tensor::zeros({4, 6});
  try {
    t.view({5, 5});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4, 6)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(5, 5)"), std::string::npos) << e.what();
  }
}

TEST(Tensor, Narrow0SelectsRowsOfTheFirstAxis) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor rows = t.narrow0(1, 3);
  EXPECT_EQ(rows.shape(), Shape({2, 2}));
  EXPECT_EQ(rows.to_vector(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_THROW(t.narrow0(3, 5), Error);
}

TEST(Tensor, UpToEightDimensions) {
  Tensor t = Tensor::ones({1, 2, 1, 2, 1, 2, 1, 2});
  EXPECT_EQ(t.numel(), 16);
  EXPECT_THROW(Shape({1, 1, 1, 1, 1, 1, 1, 1, 1}), Error);
}

TEST(Tensor, NegativeAxesCountFromTheEnd) {
  Tensor t = Tensor::zeros({2, 3, 5});
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_THROW(t.size(3), Error);
}

TEST(Tensor, CudaDeviceWithoutBackendOrGpuIsAClearError) {
  try {
    Tensor::zeros({2}, Device::cuda(0));
    GTEST_SKIP() << "a CUDA device is present";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

TEST(Device, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

}  // namespace
}  // namespace tarn
