// state_dict / load_state_dict: names, order, in-place copies, and errors that name the tensor.
#include "framework/io/state_dict.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/io/io_test_util.h"

namespace tarn {
namespace {

class Block : public Module {
 public:
  explicit Block(int64_t d) : weight(Tensor::zeros({d, d})), bias(Tensor::zeros({d})) {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  Tensor weight, bias;
};

class Net : public Module {
 public:
  Net(int64_t d = 3) : fc1(d), fc2(d), proj(Tensor::zeros({2, d})) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_buffer("proj", proj);
  }
  Block fc1, fc2;
  Tensor proj;  // a buffer (e.g. a FAVOR+ projection): saved, not trained
};

void fill_ramp(Tensor& t, float start) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = start + static_cast<float>(i);
}

TEST(StateDict, ParametersThenBuffersUnderHierarchicalNames) {
  Net net;
  const TensorList sd = state_dict(net);
  std::vector<std::string> names;
  for (const auto& [n, t] : sd) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "proj"}));
  // Aliases, not copies.
  EXPECT_TRUE(sd[0].second.same_storage(net.fc1.weight));
  EXPECT_FALSE(sd[0].second.requires_grad());
}

TEST(StateDict, LoadCopiesInPlaceKeepingTheTensorObjects) {
  Net src, dst;
  fill_ramp(src.fc1.weight, 1);
  fill_ramp(src.fc1.bias, 10);
  fill_ramp(src.fc2.weight, 20);
  fill_ramp(src.fc2.bias, 30);
  fill_ramp(src.proj, 40);
  const Tensor* before = &dst.fc1.weight;
  const auto storage_before = dst.fc1.weight.storage();
  const StateDictLoadResult r = load_state_dict(dst, state_dict(src));
  EXPECT_TRUE(r.missing.empty());
  EXPECT_TRUE(r.unexpected.empty());
  EXPECT_EQ(&dst.fc1.weight, before);
  EXPECT_EQ(dst.fc1.weight.storage(), storage_before);  // same storage, new values
  EXPECT_TRUE(dst.fc1.weight.requires_grad());
  EXPECT_EQ(dst.fc1.weight.to_vector(), src.fc1.weight.to_vector());
  EXPECT_EQ(dst.fc2.bias.to_vector(), (std::vector<float>{30, 31, 32}));
  EXPECT_EQ(dst.proj.to_vector(), src.proj.to_vector());
  // Values are copies: changing the source later does not reach the destination.
  src.fc2.bias.f32()[0] = -1;
  EXPECT_EQ(dst.fc2.bias.to_vector()[0], 30.0f);
}

TEST(StateDict, SaveLoadThroughSafetensors) {
  testing::ScratchDir dir;
  Net src, dst;
  fill_ramp(src.fc1.weight, 0.5f);
  fill_ramp(src.proj, -3);
  save_safetensors(dir / "m.safetensors", state_dict(src));
  load_state_dict(dst, load_safetensors(dir / "m.safetensors").tensors, true, dir / "m.safetensors");
  EXPECT_EQ(dst.fc1.weight.to_vector(), src.fc1.weight.to_vector());
  EXPECT_EQ(dst.proj.to_vector(), src.proj.to_vector());
}

TEST(StateDict, ShapeMismatchNamesTheTensorAndBothShapesAndChangesNothing) {
  Net small(3), big(4);
  fill_ramp(small.fc1.bias, 5);
  const std::vector<float> untouched = small.fc1.bias.to_vector();
  const std::string msg = testing::error_of([&] { load_state_dict(small, state_dict(big), true, "ckpt/model.safetensors"); });
  EXPECT_NE(msg.find("load_state_dict(ckpt/model.safetensors): 5 shape mismatches:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc1.weight has shape (4, 4) in ckpt/model.safetensors but (3, 3) in the model"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("proj has shape (2, 4)"), std::string::npos) << msg;
  EXPECT_EQ(small.fc1.bias.to_vector(), untouched);
  // Non-strict loading does not excuse shape mismatches.
  EXPECT_ERROR_CONTAINS(load_state_dict(small, state_dict(big), false), "shape mismatch");
}

TEST(StateDict, MissingAndUnexpectedNames) {
  Net net;
  TensorList partial = state_dict(Net());
  partial.erase(partial.begin() + 1);                                 // fc1.bias
  partial.emplace_back("lm_head.weight", Tensor::zeros({3, 3}));       // not in the model
  const std::string msg = testing::error_of([&] { load_state_dict(net, partial, true, "x.safetensors"); });
  EXPECT_NE(msg.find("1 model tensor is missing from x.safetensors: fc1.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 tensor in x.safetensors the model does not have: lm_head.weight"), std::string::npos) << msg;

  fill_ramp(partial[0].second, 7);  // fc1.weight
  const StateDictLoadResult r = load_state_dict(net, partial, /*strict=*/false);
  EXPECT_EQ(r.missing, std::vector<std::string>{"fc1.bias"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"lm_head.weight"});
  EXPECT_EQ(net.fc1.weight.to_vector()[0], 7.0f);

  TensorList dup = state_dict(Net());
  dup.push_back(dup.front());
  EXPECT_ERROR_CONTAINS(load_state_dict(net, dup), "tensor fc1.weight appears twice");
}

TEST(StateDict, ConvertsBetweenF32Bf16AndF16) {
  Net net;
  const std::vector<float> values = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-7f, -0.0f, 3.14159f, 1e5f, 6e-8f};
  Tensor w = Tensor::from_vector(values, {3, 3});
  // To bf16 and f16 via a file written by another tool, back into f32 parameters.
  const uint16_t bf16_bits[] = {0x3F80, 0xC020, 0x3DCD, 0x4780, 0x33D7, 0x8000, 0x4049, 0x47C3, 0x3381};
  const uint16_t f16_bits[] = {0x3C00, 0xC100, 0x2E66, 0x7BFF, 0x0002, 0x8000, 0x4248, 0x7C00, 0x0001};
  for (int which = 0; which < 2; ++which) {
    Tensor half = Tensor::empty({3, 3}, Device::cpu(), which == 0 ? DType::bf16 : DType::f16);
    std::memcpy(half.data<char>(), which == 0 ? bf16_bits : f16_bits, 18);
    TensorList sd = state_dict(Net());
    sd[0].second = half;
    load_state_dict(net, sd);
    const std::vector<float> got = net.fc1.weight.to_vector();
    for (size_t i = 0; i < values.size(); ++i) {
      SCOPED_TRACE(which == 0 ? "bf16" : "f16");
      const float v = values[i];
      if (which == 1 && v == 1e5f) {
        EXPECT_TRUE(std::isinf(got[i]));  // beyond f16's range
      } else {
        const float tol = which == 0 ? std::abs(v) / 128 : std::max(std::abs(v) / 1024, 6e-8f);
        EXPECT_NEAR(got[i], v, tol) << "element " << i;
      }
    }
  }
  // And f32 values into bf16 / f16 parameters: round to nearest even, exactly as the bit tables.
  class HalfNet : public Module {
   public:
    explicit HalfNet(DType t) : w(Tensor::empty({3, 3}, Device::cpu(), t)) { register_parameter("w", w); }
    Tensor w;
  };
  for (int which = 0; which < 2; ++which) {
    HalfNet hn(which == 0 ? DType::bf16 : DType::f16);
    load_state_dict(hn, {{"w", w}});
    const uint16_t* expect = which == 0 ? bf16_bits : f16_bits;
    for (int i = 0; i < 9; ++i)
      EXPECT_EQ(hn.w.data<uint16_t>()[i], expect[i]) << (which == 0 ? "bf16" : "f16") << " element " << i;
  }
}

}  // namespace
}  // namespace tarn
