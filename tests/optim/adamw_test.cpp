// framework/optim/adamw.h: AdamW against a naive double-precision AdamW over several steps,
// the decay rule, skipped parameters, and a checkpoint round trip that continues bit-identically.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "framework/optim/adamw.h"
#include "framework/rng.h"

namespace tarn {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Philox rng(seed);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * rng.normal();
  return t;
}

std::vector<double> as_double(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  return {v.begin(), v.end()};
}

// torch.optim.AdamW, one parameter, in double.
struct ReferenceAdamW {
  std::vector<double> p, m, v;
  int64_t step = 0;

  void update(const std::vector<float>& g, const AdamWOptions& o, bool decay) {
    ++step;
    const double lr = o.lr, b1 = o.beta1, b2 = o.beta2, wd = decay ? o.weight_decay : 0.0;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
    const double bc2 = 1 - std::pow(b2, static_cast<double>(step));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * static_cast<double>(g[i]) * g[i];
      p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + o.eps);
    }
  }
};

double max_abs_diff(const Tensor& a, const std::vector<double>& b) {
  const std::vector<float> av = a.to_vector();
  double d = 0;
  for (size_t i = 0; i < b.size(); ++i) d = std::max(d, std::fabs(av[i] - b[i]));
  return d;
}

// A weight and a bias with fresh gradients each step, run against the reference.
void run_against_reference(const AdamWOptions& opt, int steps) {
  Tensor w = random_tensor({17, 9}, 1), b = random_tensor({17}, 2);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  AdamW adamw({{"fc.weight", &w}, {"fc.bias", &b}}, opt);
  ReferenceAdamW rw{as_double(w), std::vector<double>(w.numel()), std::vector<double>(w.numel())};
  ReferenceAdamW rb{as_double(b), std::vector<double>(b.numel()), std::vector<double>(b.numel())};
  for (int s = 0; s < steps; ++s) {
    const Tensor gw = random_tensor(w.shape(), 100 + s), gb = random_tensor(b.shape(), 200 + s, 0.1f);
    w.set_grad(gw);
    b.set_grad(gb);
    adamw.step();
    rw.update(gw.to_vector(), opt, true);
    rb.update(gb.to_vector(), opt, false);  // biases do not decay under the default rule
    // Each step moves a parameter by about lr; f32 keeps it to ~1e-7 relative of |p| ~ 3.
    EXPECT_LT(max_abs_diff(w, rw.p), 2e-6) << "step " << s + 1;
    EXPECT_LT(max_abs_diff(b, rb.p), 2e-6) << "step " << s + 1;
  }
  EXPECT_EQ(adamw.step_count(), steps);
}

TEST(AdamW, MatchesDoubleReferenceWithoutWeightDecay) {
  run_against_reference({1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f}, 8);
}

TEST(AdamW, MatchesDoubleReferenceWithDecoupledWeightDecay) {
  run_against_reference({5e-3f, 0.8f, 0.95f, 1e-6f, 0.3f}, 8);
}

TEST(AdamW, FirstStepMovesEachWeightByLrInTheGradientsSignThanksToBiasCorrection) {
  // At t = 1, m̂ = g and v̂ = g², so the step is lr * g / (|g| + eps) ≈ lr * sign(g).
  Tensor w = random_tensor({100}, 3);
  w.set_requires_grad(true);
  const std::vector<float> before = w.to_vector();
  // Without bias correction this step would be lr * (1-b1)/sqrt(1-b2) ≈ 3.2 lr.
  const Tensor g = random_tensor({100}, 4, 1e-3f);
  w.set_grad(g);
  AdamW opt({{"w", &w}}, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f});
  opt.step();
  const std::vector<float> after = w.to_vector(), gv = g.to_vector();
  for (int i = 0; i < 100; ++i) {
    const double step = static_cast<double>(before[i]) - after[i];
    const double expected = 1e-2 * gv[i] / (std::fabs(gv[i]) + 1e-8);
    EXPECT_NEAR(step, expected, 5e-7) << "element " << i;
    if (std::fabs(gv[i]) > 1e-5) {
      EXPECT_NEAR(std::fabs(step), 1e-2, 1e-5);
    }
  }
}

TEST(AdamW, WeightDecayIsDecoupledFromTheGradient) {
  // With a zero gradient Adam's update is 0/(0+eps) = 0, so only the decay acts: p * (1 - lr*wd).
  Tensor w = Tensor::full({4}, 2.0f), b = Tensor::full({4}, 2.0f);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  w.set_grad(Tensor::zeros({4}));
  b.set_grad(Tensor::zeros({4}));
  AdamW opt({{"layer.weight", &w}, {"layer.bias", &b}}, {0.1f, 0.9f, 0.999f, 1e-8f, 0.5f});
  opt.step();
  for (float x : w.to_vector()) EXPECT_FLOAT_EQ(x, 2.0f * (1.0f - 0.1f * 0.5f));
  for (float x : b.to_vector()) EXPECT_EQ(x, 2.0f);  // excluded from decay
}

TEST(AdamW, DefaultDecayRuleExcludesBiasesAndBartLayerNorms) {
  for (const char* no : {"model.encoder.layers.0.fc1.bias", "final_logits_bias",
                         "model.encoder.layers.0.self_attn_layer_norm.weight",
                         "model.decoder.layers.1.final_layer_norm.weight", "model.encoder.layernorm_embedding.weight",
                         "bert.encoder.layer.0.output.LayerNorm.weight"})
    EXPECT_FALSE(decays_unless_bias_or_norm(no)) << no;
  for (const char* yes : {"model.shared.weight", "model.encoder.embed_positions.weight",
                          "model.decoder.layers.0.encoder_attn.q_proj.weight", "model.encoder.layers.0.fc2.weight"})
    EXPECT_TRUE(decays_unless_bias_or_norm(yes)) << yes;
  const DecayRule hf_old = decay_unless_name_contains({"bias", "LayerNorm.weight"});
  EXPECT_FALSE(hf_old("x.LayerNorm.weight"));
  EXPECT_TRUE(hf_old("x.self_attn_layer_norm.weight"));
  EXPECT_TRUE(decays_always("fc.bias"));
}

TEST(AdamW, CustomDecayRuleDecidesPerParameter) {
  Tensor a = Tensor::ones({2}), b = Tensor::ones({2});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  AdamW opt({{"a", &a}, {"b", &b}}, {}, [](const std::string& n) { return n == "b"; });
  EXPECT_FALSE(opt.decays("a"));
  EXPECT_TRUE(opt.decays("b"));
  EXPECT_THROW(opt.decays("c"), Error);
}

TEST(AdamW, ParametersWithoutGradientAreSkippedAndKeepTheirOwnStepCount) {
  Tensor used = random_tensor({5}, 5), frozen = random_tensor({5}, 6);
  used.set_requires_grad(true);
  frozen.set_requires_grad(true);
  const std::vector<float> frozen_before = frozen.to_vector();
  const AdamWOptions o{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f};
  AdamW opt({{"used", &used}, {"frozen", &frozen}}, o);
  for (int s = 0; s < 3; ++s) {
    used.set_grad(random_tensor({5}, 50 + s));
    opt.step();
  }
  EXPECT_EQ(frozen.to_vector(), frozen_before);  // not even decayed
  AdamWState st = opt.state();
  EXPECT_EQ(st.step_count, 3);
  EXPECT_EQ(st.params.at("used").step, 3);
  EXPECT_EQ(st.params.at("frozen").step, 0);

  // Its first update, on the optimizer's 4th step, is bias-corrected as a first step.
  ReferenceAdamW ref{as_double(frozen), std::vector<double>(5), std::vector<double>(5)};
  const Tensor g = random_tensor({5}, 99);
  frozen.set_grad(g);
  used.zero_grad();
  opt.step();
  ref.update(g.to_vector(), o, true);
  EXPECT_LT(max_abs_diff(frozen, ref.p), 1e-6);
  EXPECT_EQ(opt.state().params.at("frozen").step, 1);
}

TEST(AdamW, TiedWeightListedTwiceIsUpdatedOnce) {
  // BART ties lm_head.weight to model.shared.weight: one tensor, two names.
  Tensor shared = random_tensor({4, 3}, 21), alone = shared.clone();
  shared.set_requires_grad(true);
  alone.set_requires_grad(true);
  const Tensor g = random_tensor({4, 3}, 22);
  shared.set_grad(g);
  alone.set_grad(g);
  AdamW tied({{"model.shared.weight", &shared}, {"lm_head.weight", &shared}});
  AdamW single({{"model.shared.weight", &alone}});
  tied.step();
  single.step();
  EXPECT_EQ(shared.to_vector(), alone.to_vector());
  EXPECT_EQ(tied.names(), std::vector<std::string>{"model.shared.weight"});
}

TEST(AdamW, ZeroGradDropsEveryGradient) {
  Tensor a = Tensor::ones({2});
  a.set_requires_grad(true);
  a.set_grad(Tensor::ones({2}));
  AdamW opt({{"a", &a}});
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdamW, SetLrChangesTheNextStepOnly) {
  Tensor a = Tensor::ones({3});
  a.set_requires_grad(true);
  AdamW opt({{"a", &a}}, {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f});
  opt.set_lr(0.0f);
  a.set_grad(Tensor::ones({3}));
  opt.step();
  for (float x : a.to_vector()) EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(opt.lr(), 0.0f);
  EXPECT_THROW(opt.set_lr(-1.0f), Error);
  EXPECT_THROW(opt.set_lr(NAN), Error);
}

TEST(AdamW, RejectsBadOptionsAndDuplicateNames) {
  Tensor a = Tensor::ones({2});
  EXPECT_THROW(AdamW({{"a", &a}}, {1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f}), Error);
  EXPECT_THROW(AdamW({{"a", &a}}, {1e-3f, 0.9f, 0.999f, 0.0f, 0.0f}), Error);
  EXPECT_THROW(AdamW({{"a", &a}}, {1e-3f, 0.9f, 0.999f, 1e-8f, -0.1f}), Error);
  EXPECT_THROW(AdamW({{"a", &a}, {"a", &a}}), Error);
  Tensor undefined;
  EXPECT_THROW(AdamW({{"u", &undefined}}), Error);
  Tensor wrong_grad = Tensor::ones({2});
  wrong_grad.set_requires_grad(true);
  wrong_grad.set_grad(Tensor::ones({2}));
  AdamW opt({{"g", &wrong_grad}});
  wrong_grad.mutable_meta()->grad = Tensor::ones({3});  // bypasses set_grad's own check
  EXPECT_THROW(opt.step(), Error);
}

// Three steps, checkpoint, three more; a fresh optimizer restored from the checkpoint (with
// parameter values saved at the same point) must reproduce the last three steps bit for bit.
TEST(AdamW, RestoredStateContinuesBitIdentically) {
  const AdamWOptions o{3e-3f, 0.9f, 0.98f, 1e-6f, 0.05f};
  Tensor w = random_tensor({33, 7}, 7), b = random_tensor({33}, 8);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  AdamW opt({{"fc.weight", &w}, {"fc.bias", &b}}, o);
  const auto grads_for = [](int s) { return std::make_pair(random_tensor({33, 7}, 300 + s), random_tensor({33}, 400 + s)); };
  for (int s = 0; s < 3; ++s) {
    auto [gw, gb] = grads_for(s);
    w.set_grad(gw);
    b.set_grad(gb);
    opt.step();
  }
  const AdamWState saved = opt.state();
  Tensor w2 = w.clone(), b2 = b.clone();  // what the checkpoint stores for the model
  w2.set_requires_grad(true);
  b2.set_requires_grad(true);
  for (int s = 3; s < 6; ++s) {
    auto [gw, gb] = grads_for(s);
    w.set_grad(gw);
    b.set_grad(gb);
    opt.step();
  }
  // The saved copy must not have moved with the live optimizer.
  EXPECT_EQ(saved.step_count, 3);
  EXPECT_EQ(saved.params.at("fc.weight").step, 3);

  AdamW restored({{"fc.weight", &w2}, {"fc.bias", &b2}}, o);
  restored.load_state(saved);
  EXPECT_EQ(restored.step_count(), 3);
  for (int s = 3; s < 6; ++s) {
    auto [gw, gb] = grads_for(s);
    w2.set_grad(gw);
    b2.set_grad(gb);
    restored.step();
  }
  EXPECT_EQ(w2.to_vector(), w.to_vector());
  EXPECT_EQ(b2.to_vector(), b.to_vector());
  const AdamWState a = opt.state(), c = restored.state();
  for (const char* n : {"fc.weight", "fc.bias"}) {
    EXPECT_EQ(a.params.at(n).exp_avg.to_vector(), c.params.at(n).exp_avg.to_vector()) << n;
    EXPECT_EQ(a.params.at(n).exp_avg_sq.to_vector(), c.params.at(n).exp_avg_sq.to_vector()) << n;
  }
}

TEST(AdamW, StateViewAliasesTheLiveMomentsWhileStateCopies) {
  Tensor w = Tensor::ones({3});
  w.set_requires_grad(true);
  AdamW opt({{"w", &w}});
  const AdamWState copy = opt.state(), view = opt.state_view();
  w.set_grad(Tensor::ones({3}));
  opt.step();
  EXPECT_EQ(copy.params.at("w").exp_avg.to_vector(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(view.params.at("w").exp_avg.to_vector(), opt.state().params.at("w").exp_avg.to_vector());
  EXPECT_NE(view.params.at("w").exp_avg.to_vector(), std::vector<float>(3, 0.0f));
}

TEST(AdamW, LoadStateRejectsMismatchedCheckpointsAndChangesNothing) {
  Tensor w = Tensor::ones({4, 2});
  w.set_requires_grad(true);
  AdamW opt({{"w", &w}});
  AdamWState good = opt.state();

  AdamWState missing;
  missing.params["other"] = good.params.at("w");
  EXPECT_THROW(opt.load_state(missing), Error);

  AdamWState wrong_shape = good;
  wrong_shape.params.at("w").exp_avg_sq = Tensor::zeros({8});
  EXPECT_THROW(opt.load_state(wrong_shape), Error);

  AdamWState future_step = good;
  future_step.params.at("w").step = 5;  // more updates than optimizer steps
  EXPECT_THROW(opt.load_state(future_step), Error);

  AdamWState extra = good;
  extra.params["x"] = good.params.at("w");
  EXPECT_THROW(opt.load_state(extra), Error);
  EXPECT_EQ(opt.step_count(), 0);
}

}  // namespace
}  // namespace tarn
