// framework/optim/adamw_state_io.h: AdamW's state through a real safetensors file and back,
// continuing bit-identically; malformed files are rejected with the key named.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <unistd.h>

#include "framework/io/safetensors.h"
#include "framework/optim/adamw_state_io.h"
#include "framework/rng.h"

namespace tarn {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Philox rng(seed);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal();
  return t;
}

std::string temp_path(const char* name) {
  return testing::TempDir() + "tarn_" + std::to_string(getpid()) + "_" + name;
}

TEST(AdamWStateIo, SafetensorsRoundTripContinuesBitIdentically) {
  const AdamWOptions o{1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f};
  Tensor w = random_tensor({6, 5}, 1), b = random_tensor({6}, 2), frozen = random_tensor({3}, 3);
  for (Tensor* t : {&w, &b, &frozen}) t->set_requires_grad(true);
  const std::vector<std::pair<std::string, Tensor*>> params{{"fc.weight", &w}, {"fc.bias", &b}, {"frozen", &frozen}};
  AdamW opt(params, o);
  for (int s = 0; s < 4; ++s) {
    w.set_grad(random_tensor(w.shape(), 10 + s));
    if (s % 2 == 0) b.set_grad(random_tensor(b.shape(), 20 + s));  // b lags: its own step count
    else b.zero_grad();
    opt.step();
  }
  const std::string path = temp_path("optimizer.safetensors");
  const FlatOptimizerState flat = flatten_adamw_state(opt.state_view());  // written before the next step
  save_safetensors(path, flat.tensors, flat.metadata);
  Tensor w2 = w.clone(), b2 = b.clone(), frozen2 = frozen.clone();
  for (Tensor* t : {&w2, &b2, &frozen2}) t->set_requires_grad(true);

  const SafetensorsFile file = load_safetensors(path);
  std::remove(path.c_str());
  AdamW restored({{"fc.weight", &w2}, {"fc.bias", &b2}, {"frozen", &frozen2}}, o);
  restored.load_state(unflatten_adamw_state(file.tensors, file.metadata, path));
  EXPECT_EQ(restored.step_count(), 4);
  EXPECT_EQ(restored.state().params.at("fc.bias").step, 2);
  EXPECT_EQ(restored.state().params.at("frozen").step, 0);

  for (int s = 4; s < 7; ++s) {
    const Tensor gw = random_tensor(w.shape(), 10 + s), gb = random_tensor(b.shape(), 20 + s);
    w.set_grad(gw);
    b.set_grad(gb);
    w2.set_grad(gw);
    b2.set_grad(gb);
    opt.step();
    restored.step();
  }
  EXPECT_EQ(w2.to_vector(), w.to_vector());
  EXPECT_EQ(b2.to_vector(), b.to_vector());
}

TEST(AdamWStateIo, MalformedStateIsRejectedNamingTheKey) {
  Tensor w = Tensor::ones({2});
  w.set_requires_grad(true);
  AdamW opt({{"w", &w}});
  const FlatOptimizerState good = flatten_adamw_state(opt.state());
  const auto message = [](const TensorList& t, const SafetensorsMetadata& m) {
    try {
      unflatten_adamw_state(t, m, "opt.safetensors");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };

  SafetensorsMetadata no_step = good.metadata;
  no_step.erase("step.w");
  EXPECT_NE(message(good.tensors, no_step).find("\"step.w\""), std::string::npos);

  SafetensorsMetadata bad_count = good.metadata;
  bad_count["step_count"] = "12x";
  EXPECT_NE(message(good.tensors, bad_count).find("step_count"), std::string::npos);

  SafetensorsMetadata unnamed = good.metadata;  // as app/checkpoint_state.cpp writes it
  unnamed.erase("optimizer");
  EXPECT_EQ(message(good.tensors, unnamed), "no error");

  SafetensorsMetadata other = good.metadata;
  other["optimizer"] = "sgd";
  EXPECT_NE(message(good.tensors, other).find("\"sgd\""), std::string::npos);

  TensorList half{good.tensors[0]};  // exp_avg without exp_avg_sq
  EXPECT_NE(message(half, good.metadata).find("exp_avg_sq.w"), std::string::npos);

  TensorList stray = good.tensors;
  stray.emplace_back("momentum.w", Tensor::ones({2}));
  EXPECT_NE(message(stray, good.metadata).find("\"momentum.w\""), std::string::npos);
  EXPECT_NE(message(stray, good.metadata).find("opt.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace tarn
