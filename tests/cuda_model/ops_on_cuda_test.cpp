// Framework ops on cuda:0 tensors (the emulated CUDA backend) against the same ops on the CPU:
// forward values, gradients of every input, and the device everything lands on.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/ops/attention.h"
#include "framework/ops/delta_rule.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"
#include "framework/optim/adamw.h"
#include "framework/optim/clip_grad.h"
#include "tests/common/gradcheck.h"
#include "tests/cuda_model/emulated_cuda.h"

namespace tarn {
namespace {

using testing::emulated_cuda;
using testing::max_relative_difference;
using testing::op_tolerance;
using testing::random_tensor;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Input {
  Shape shape;
  float lo = -1.0f, hi = 1.0f;
  bool grad = true;
};

// Runs fn on CPU leaves and on cuda:0 copies of them, seeds both backwards with the same
// random gradient, and compares the outputs and every input's gradient within tol
// (op_tolerance: n, the longest sum on any output's or gradient's path; the math functions on it).
void expect_cuda_matches_cpu(const std::string& what, const std::vector<Input>& inputs, const Fn& fn, double tol) {
  SCOPED_TRACE(what);
  const Device cuda = emulated_cuda();
  std::vector<Tensor> on_cpu, on_cuda;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor h = random_tensor(inputs[i].shape, 100 + i, inputs[i].lo, inputs[i].hi);
    Tensor c = h.clone(), g = h.to(cuda);
    if (inputs[i].grad) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    on_cpu.push_back(c);
    on_cuda.push_back(g);
  }
  const Tensor y_cpu = fn(on_cpu), y_cuda = fn(on_cuda);
  ASSERT_EQ(y_cuda.device(), cuda) << "output left the device";
  ASSERT_EQ(y_cuda.shape(), y_cpu.shape());
  EXPECT_LE(max_relative_difference(y_cuda.to_vector(), y_cpu.to_vector()), tol) << "forward";
  if (!y_cpu.requires_grad()) return;
  const Tensor seed = random_tensor(y_cpu.shape(), 7);
  y_cpu.backward(seed);
  y_cuda.backward(seed.to(cuda));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].grad) continue;
    const Tensor gc = on_cpu[i].grad(), gg = on_cuda[i].grad();
    ASSERT_TRUE(gc.defined() && gg.defined()) << "input " << i << " has no gradient";
    EXPECT_EQ(gg.device(), cuda) << "gradient of input " << i;
    EXPECT_LE(max_relative_difference(gg.to_vector(), gc.to_vector()), tol) << "gradient of input " << i;
  }
}

TEST(OpsOnCuda, ElementwiseAndBroadcastMatchTheCpu) {
  // Gradients of broadcast inputs sum over the stretched axes: 3 x 5, 3 x 7, 6 terms; div's
  // gradient takes 4 roundings.
  expect_cuda_matches_cpu("add bias", {{{3, 5, 7}}, {{7}}}, [](auto& x) { return add(x[0], x[1]); },
                          op_tolerance(15));
  expect_cuda_matches_cpu("sub broadcast", {{{3, 1, 7}}, {{5, 1}}}, [](auto& x) { return sub(x[0], x[1]); },
                          op_tolerance(21));
  expect_cuda_matches_cpu("mul broadcast", {{{4, 6}}, {{4, 1}}}, [](auto& x) { return mul(x[0], x[1]); },
                          op_tolerance(6));
  expect_cuda_matches_cpu("div", {{{4, 6}}, {{4, 6}, 0.5f, 2.0f}}, [](auto& x) { return div(x[0], x[1]); },
                          op_tolerance(4));
  // 8 ops, 3 of them functions (exp, log, tanh); log turns exp's relative error into an absolute
  // one on x >= 0.1: up to 10 times relative.
  expect_cuda_matches_cpu(
      "unary chain", {{{33, 5}, 0.1f, 2.0f}},
      [](auto& x) { return tanh(relu(add_scalar(scale(sqrt(log(exp(neg(neg(x[0]))))), 1.5f), -0.7f))); },
      10 * op_tolerance(8, 3));
}

TEST(OpsOnCuda, ReductionsMatchTheCpu) {
  // Sums of 17, 5 (and the division), 301 and 63 (and the division) values; their gradients
  // broadcast.
  expect_cuda_matches_cpu("sum axis", {{{3, 17, 5}}}, [](auto& x) { return sum(x[0], 1); }, op_tolerance(17));
  expect_cuda_matches_cpu("mean keepdim", {{{3, 17, 5}}}, [](auto& x) { return mean(x[0], -1, true); },
                          op_tolerance(6));
  expect_cuda_matches_cpu("sum_all", {{{301}}}, [](auto& x) { return sum_all(x[0]); }, op_tolerance(301));
  expect_cuda_matches_cpu("mean_all", {{{7, 9}}}, [](auto& x) { return mean_all(x[0]); }, op_tolerance(64));
}

TEST(OpsOnCuda, MatmulsMatchTheCpu) {
  // K = 7 forward; the gradients' GEMMs sum over N, M (5) or, for a shared b, every row of the
  // batch (2 x 3 x 5 = 30, 3 x 5 = 15); linear's weight and bias gradients over its 10 rows.
  expect_cuda_matches_cpu("2-D", {{{5, 7}}, {{7, 3}}}, [](auto& x) { return matmul(x[0], x[1]); },
                          op_tolerance(7, 0, true));
  expect_cuda_matches_cpu("batched, transposed b", {{{2, 3, 5, 7}}, {{2, 3, 4, 7}}},
                          [](auto& x) { return matmul(x[0], x[1], false, true); }, op_tolerance(7, 0, true));
  expect_cuda_matches_cpu("batched, transposed a", {{{2, 7, 5}}, {{2, 7, 3}}},
                          [](auto& x) { return matmul(x[0], x[1], true, false); }, op_tolerance(7, 0, true));
  expect_cuda_matches_cpu("shared b", {{{2, 3, 5, 7}}, {{7, 4}}}, [](auto& x) { return matmul(x[0], x[1]); },
                          op_tolerance(30, 0, true));
  expect_cuda_matches_cpu("shared b, transposed a", {{{3, 7, 5}}, {{7, 4}}},
                          [](auto& x) { return matmul(x[0], x[1], true, false); }, op_tolerance(15, 0, true));
  expect_cuda_matches_cpu("linear with bias", {{{2, 5, 7}}, {{6, 7}}, {{6}}},
                          [](auto& x) { return linear(x[0], x[1], x[2]); }, op_tolerance(10, 0, true));
}

TEST(OpsOnCuda, NeuralNetworkOpsMatchTheCpu) {
  // Rows of 37 (and the exp argument, the division; log-softmax's log); layer norm's two row
  // sums of 19 in sequence and the backward's two, its parameters' over 10 rows; GELU's ~8 and
  // ~12 roundings with erf and exp, tanh and exp; dropout's one product; an embedding row's
  // gradient sums its 2 repeats.
  expect_cuda_matches_cpu("softmax", {{{6, 37}}}, [](auto& x) { return softmax(x[0]); }, op_tolerance(40, 1));
  expect_cuda_matches_cpu("log_softmax", {{{6, 37}}}, [](auto& x) { return log_softmax(x[0]); },
                          op_tolerance(40, 2));
  expect_cuda_matches_cpu("layer_norm", {{{2, 5, 19}}, {{19}}, {{19}}},
                          [](auto& x) { return layer_norm(x[0], x[1], x[2]); }, op_tolerance(4 * 19 + 8));
  expect_cuda_matches_cpu("gelu exact", {{{3, 41}, -3.0f, 3.0f}}, [](auto& x) { return gelu(x[0]); },
                          op_tolerance(8, 2));
  expect_cuda_matches_cpu("gelu tanh", {{{3, 41}, -3.0f, 3.0f}},
                          [](auto& x) { return gelu(x[0], GeluKind::tanh); }, op_tolerance(12, 2));
  expect_cuda_matches_cpu("dropout (same Philox mask)", {{{5, 33}}},
                          [](auto& x) { return dropout(x[0], 0.3f, true, 42, 3); }, op_tolerance(1));
  const std::vector<int32_t> ids = {3, 0, 7, 3, 9, 1};
  expect_cuda_matches_cpu("embedding (repeated ids)", {{{10, 6}}},
                          [&](auto& x) { return embedding(x[0], ids, Shape{2, 3}); }, op_tolerance(2));
  const std::vector<int32_t> targets = {1, -100, 4, 4, 0, 12};
  CrossEntropyOptions ce;
  ce.ignore_index = -100;
  ce.label_smoothing = 0.1f;
  // lse over 13 logits (exp, log), the mean over the 5 counted rows.
  expect_cuda_matches_cpu("cross_entropy", {{{2, 3, 13}, -3.0f, 3.0f}},
                          [&](auto& x) { return cross_entropy(x[0], targets, ce); }, op_tolerance(13 + 5 + 4, 2));
}

TEST(OpsOnCuda, ShapeOpsMatchTheCpu) {
  // Copies: no rounding (one for the exp and its gradient's product).
  expect_cuda_matches_cpu("reshape + permute", {{{2, 3, 4, 5}}},
                          [](auto& x) { return permute(reshape(x[0], {6, 4, 5}), {2, 0, 1}); }, op_tolerance(1));
  expect_cuda_matches_cpu("transpose", {{{2, 3, 5}}}, [](auto& x) { return transpose(x[0], 0, 2); },
                          op_tolerance(1));
  expect_cuda_matches_cpu("slice", {{{4, 9, 3}}}, [](auto& x) { return slice(x[0], 1, 2, 7); }, op_tolerance(1));
  expect_cuda_matches_cpu("concat", {{{2, 3, 4}}, {{2, 5, 4}}}, [](auto& x) { return concat({x[0], x[1]}, 1); },
                          op_tolerance(1));
  expect_cuda_matches_cpu(
      "to_device and back", {{{3, 4}}},
      [](auto& x) { return to_device(exp(to_device(x[0], Device::cpu())), x[0].device()); }, op_tolerance(1, 1));
}

// (B, H, N, d) inputs with a padding mask that hides the last key of the second sequence.
Tensor padding_mask(int64_t batch, int64_t n, Device device) {
  std::vector<float> m(static_cast<size_t>(batch * n), 0.0f);
  m.back() = 1.0f;
  return Tensor::from_vector(m, Shape{batch, n}).to(device);
}

TEST(OpsOnCuda, LinearAttentionMatchesTheCpuForEveryFeatureMap) {
  for (FeatureMap map : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::identity}) {
    for (bool causal : {false, true}) {
      LinearAttentionOptions opt;
      opt.causal = causal;
      opt.chunk = 4;  // several chunks in N = 11
      opt.fused_feature_map = map;
      expect_cuda_matches_cpu(
          std::string("linear attention, map ") + kernels::cpu::feature_map_name(map) + (causal ? ", causal" : ""),
          {{{2, 2, 11, 5}}, {{2, 2, 11, 5}}, {{2, 2, 11, 3}}},
          [&](auto& x) {
            LinearAttentionOptions o = opt;
            o.key_padding_mask = padding_mask(2, 11, x[0].device());
            return linear_attention(x[0], x[1], x[2], o);
          },
          // Each term through d = 5 features, N = 11 keys, e = 3 values, twice in the gradients
          // (tests/cuda/linear_attention_bound.h), the feature map's exp.
          op_tolerance(2 * (5 + 11 + 3) + 4, 1));
    }
  }
}

// Runs `run` (an attention op on three inputs, in a precision) on CPU leaves in f32, on cuda:0
// copies in bf16 and on CPU copies in bf16, backward from one seed, and checks that the CPU
// ignores bf16 (no bf16 kernel there: bit-identical to f32) while the device follows f32 within
// bf16 rounding and visibly differs from it (else its bf16 kernels did not run). Each kernel's
// conformance test bounds it elementwise; this checks the op's plumbing: casts, the saved bf16
// tensors, the mask, which gradient goes where. The bounds count roundings to bf16 (2^-8 each;
// the f32 sums' gamma_n(2^-23) is a hundred times smaller) on a path, relative to the largest
// value: forward, the op's bf16 q and k (or features), the probabilities (or chunk product,
// state), v and the stored out: 5; gradients, dout, two saved inputs, P or dS, D's out and the
// store: 6, twice over where dS = P (dP - D) cancels to half its terms, and the f32 result's
// rounding: 13.
constexpr double kBf16Forward = 5 * cuda_testing::kBf16, kBf16Gradient = 13 * cuda_testing::kBf16;
void expect_bf16_on_the_device_only(std::vector<Tensor> cpu,
                                    const std::function<Tensor(const std::vector<Tensor>&, Precision)>& run) {
  const Device cuda = emulated_cuda();
  std::vector<Tensor> dev, cpu16;
  for (Tensor& t : cpu) {
    dev.push_back(t.to(cuda));
    cpu16.push_back(t.clone());
    for (Tensor* x : {&t, &dev.back(), &cpu16.back()}) x->set_requires_grad(true);
  }
  const Tensor want = run(cpu, Precision::f32), got = run(dev, Precision::bf16), cpu_bf16 = run(cpu16, Precision::bf16);
  ASSERT_EQ(got.device(), cuda);
  ASSERT_EQ(got.dtype(), DType::f32) << "autograd sees f32 tensors only";
  const Tensor seed = random_tensor(want.shape(), 9);
  want.backward(seed);
  got.backward(seed.to(cuda));
  cpu_bf16.backward(seed);
  EXPECT_EQ(cpu_bf16.to_vector(), want.to_vector()) << "the CPU has no bf16 kernel: it must run the f32 one";
  const double forward = max_relative_difference(got.to_vector(), want.to_vector());
  EXPECT_LE(forward, kBf16Forward) << "forward";
  EXPECT_GT(forward, 1e-5) << "forward: no bf16 rounding visible";
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_TRUE(dev[i].grad().defined()) << "input " << i;
    EXPECT_EQ(dev[i].grad().device(), cuda);
    EXPECT_EQ(cpu16[i].grad().to_vector(), cpu[i].grad().to_vector()) << "CPU gradient of input " << i;
    const double gradient = max_relative_difference(dev[i].grad().to_vector(), cpu[i].grad().to_vector());
    EXPECT_LE(gradient, kBf16Gradient) << "gradient of input " << i;
    EXPECT_GT(gradient, 1e-5) << "gradient of input " << i << ": no bf16 rounding visible";
  }
}

// training.precision bf16: the bf16 linear-attention kernels (kernels/cuda_linear_attention_bf16.h)
// on the device, the f32 kernel on the CPU.
TEST(OpsOnCuda, LinearAttentionInBf16RunsTheBf16KernelsOnTheDeviceAndF32OnTheCpu) {
  const Device cuda = emulated_cuda();
  EXPECT_TRUE(linear_attention_runs_in_bf16(cuda, 64, 64));
  EXPECT_FALSE(linear_attention_runs_in_bf16(cuda, 300, 64)) << "past the kernels' 256";
  EXPECT_FALSE(linear_attention_runs_in_bf16(Device::cpu(), 64, 64));
  for (FeatureMap map : {FeatureMap::elu1, FeatureMap::exp, FeatureMap::identity}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(kernels::cpu::feature_map_name(map)) + (causal ? ", causal" : ""));
      const int64_t n = 70;  // past one 64-row chunk of the bf16 scan
      std::vector<Tensor> cpu{random_tensor({2, 2, n, 16}, 1), random_tensor({2, 2, n, 16}, 2),
                              random_tensor({2, 2, n, 8}, 3)};
      if (map == FeatureMap::identity)  // features must be positive for a normaliser away from 0
        for (int i = 0; i < 2; ++i) cpu[i] = random_tensor({2, 2, n, 16}, 1 + i, 0.1f, 1.0f);
      expect_bf16_on_the_device_only(cpu, [&](const std::vector<Tensor>& x, Precision p) {
        LinearAttentionOptions o;
        o.causal = causal;
        o.fused_feature_map = map;
        o.precision = p;
        o.key_padding_mask = padding_mask(2, n, x[0].device());
        return linear_attention(x[0], x[1], x[2], o);
      });
    }
  }
}

TEST(OpsOnCuda, FavorFeatureMapMatchesTheCpu) {
  Philox rng(5, 0);
  const Tensor w = draw_favor_projection(rng, 8, 5);
  // The projection's 5-term GEMM, |x'|^2 and the slice's max and exp; the gradient's 8-term GEMM
  // over the features.
  expect_cuda_matches_cpu(
      "favor keys", {{{2, 2, 7, 5}}},
      [&](auto& x) { return feature_map(x[0], FeatureMap::favor, FeatureRole::key, w.to(x[0].device())); },
      op_tolerance(5 + 8 + 4, 1, true));
}

TEST(OpsOnCuda, SoftmaxAttentionMatchesTheCpuKernel) {
  for (bool causal : {false, true}) {
    expect_cuda_matches_cpu(
        causal ? "softmax attention, causal" : "softmax attention, cross (Nq != Nk)",
        {{{2, 2, causal ? 9 : 6, 5}}, {{2, 2, 9, 5}}, {{2, 2, 9, 4}}},
        [&](auto& x) {
          SoftmaxAttentionOptions o;
          o.causal = causal;
          o.key_padding_mask = padding_mask(2, 9, x[0].device());
          return softmax_attention(x[0], x[1], x[2], o);
        },
        // Scores over d = 5, sums over N = 9 keys and e = 4 values, twice in the gradients
        // (tests/cuda/softmax_attention_bound.h); exp and log.
        op_tolerance(2 * (5 + 9 + 4) + 4, 2));
  }
}

// training.precision bf16 for softmax attention: the bf16 kernels (kernels/cuda_softmax_attention_bf16.h)
// on the device, the f32 kernel on the CPU.
TEST(OpsOnCuda, SoftmaxAttentionInBf16RunsTheBf16KernelsOnTheDeviceAndF32OnTheCpu) {
  const Device cuda = emulated_cuda();
  EXPECT_TRUE(softmax_attention_runs_in_bf16(cuda, 64, 64));
  EXPECT_FALSE(softmax_attention_runs_in_bf16(cuda, 64, 130)) << "past the kernels' 128";
  EXPECT_FALSE(softmax_attention_runs_in_bf16(Device::cpu(), 64, 64));
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const int64_t n = 70;  // past one 64-row tile
    expect_bf16_on_the_device_only(
        {random_tensor({2, 2, n, 16}, 1, -1.5f, 1.5f), random_tensor({2, 2, n, 16}, 2, -1.5f, 1.5f),
         random_tensor({2, 2, n, 8}, 3)},
        [&](const std::vector<Tensor>& x, Precision p) {
          SoftmaxAttentionOptions o;
          o.causal = causal;
          o.precision = p;
          o.key_padding_mask = padding_mask(2, n, x[0].device());
          return softmax_attention(x[0], x[1], x[2], o);
        });
  }
}

// training.precision bf16 for the gated delta rule: the bf16 kernels (kernels/cuda_delta_rule_bf16.h)
// on the device, the f32 kernels on the CPU; both kinds (delta, gated), the scan with a readout
// and the state-only scan, forward and reverse.
TEST(OpsOnCuda, DeltaRuleInBf16RunsTheBf16KernelsOnTheDeviceAndF32OnTheCpu) {
  const Device cuda = emulated_cuda();
  EXPECT_TRUE(delta_rule_runs_in_bf16(cuda, 64, 64));
  EXPECT_FALSE(delta_rule_runs_in_bf16(cuda, 512, 512)) << "past the shared memory of a sub-chunk";
  EXPECT_FALSE(delta_rule_runs_in_bf16(Device::cpu(), 64, 64));
  const int64_t n = 45;  // a chunk of 64: a sub-chunk of 32 and a partial one of 13
  for (bool erase : {true, false}) {
    for (bool readout : {true, false}) {
      SCOPED_TRACE(std::string(erase ? "delta" : "gated") + (readout ? ", readout" : ", state only"));
      // Small keys (|k|^2 about 1/3), beta in (0, 1), alpha in [0.6, 1]: a contracting scan.
      std::vector<Tensor> cpu{random_tensor({2, 2, n, 16}, 2, -0.25f, 0.25f), random_tensor({2, 2, n, 8}, 3),
                              random_tensor({2, 2, n}, 4, 0.05f, 0.95f), random_tensor({2, 2, n}, 5, 0.6f, 1.0f)};
      if (readout) cpu.insert(cpu.begin(), random_tensor({2, 2, n, 16}, 1, -0.25f, 0.25f));
      expect_bf16_on_the_device_only(cpu, [&](const std::vector<Tensor>& x, Precision p) {
        DeltaRuleOptions o;
        o.chunk = 64;
        o.erase = erase;
        o.reverse = !erase;
        o.precision = p;
        return readout ? delta_rule(x[0], x[1], x[2], x[3], x[4], o) : delta_rule_state(x[0], x[1], x[2], x[3], o);
      });
    }
  }
}

// Head dimensions above the CUDA kernel's tiles (128) take the matmul + softmax composition.
TEST(OpsOnCuda, SoftmaxAttentionWithWideHeadsMatchesTheCpuKernel) {
  expect_cuda_matches_cpu(
      "softmax attention, d = 130, causal",
      {{{1, 2, 5, 130}, -0.3f, 0.3f}, {{1, 2, 5, 130}, -0.3f, 0.3f}, {{1, 2, 5, 3}}},
      [&](auto& x) {
        SoftmaxAttentionOptions o;
        o.causal = true;
        o.key_padding_mask = padding_mask(1, 5, x[0].device());
        return softmax_attention(x[0], x[1], x[2], o);
      },
      // The matmul + softmax composition: scores over d = 130, N = 5 keys, e = 3, twice in the
      // gradients; GEMMs.
      op_tolerance(2 * (130 + 5 + 3) + 4, 2, true));
}

TEST(OpsOnCuda, RecurrentLinearAttentionStepMatchesTheCpu) {
  const Device cuda = emulated_cuda();
  LinearAttentionStepOptions opt;
  opt.fused_feature_map = FeatureMap::elu1;
  LinearAttentionState s_cpu = LinearAttentionState::zeros(2, 3, 4, 5);
  LinearAttentionState s_cuda{s_cpu.s.to(cuda), 0};
  for (int step = 0; step < 3; ++step) {
    const Tensor a = random_tensor({2, 3, 4}, 10 + step), b = random_tensor({2, 3, 4}, 20 + step),
                 v = random_tensor({2, 3, 5}, 30 + step);
    const Tensor o_cpu = linear_attention_step(s_cpu, a, b, v, opt);
    const Tensor o_cuda = linear_attention_step(s_cuda, a.to(cuda), b.to(cuda), v.to(cuda), opt);
    EXPECT_EQ(o_cuda.device(), cuda);
    // Each term through d = 4 features, the steps so far and e = 5 values (the state's sums
    // over up to 3 steps), elu1's exp.
    EXPECT_LE(max_relative_difference(o_cuda.to_vector(), o_cpu.to_vector()), op_tolerance(4 + 3 + 5 + 4, 1))
        << "step " << step;
  }
  EXPECT_LE(max_relative_difference(s_cuda.s.to_vector(), s_cpu.s.to_vector()), op_tolerance(3 + 2, 1));
}

// The error model of the AdamW test below (tests/cuda/tolerance.h, both sides): dL/dW sums each
// column of x over its 4 rows (a GEMM: relative error 2 gamma_4 kappa, kappa = sum |x| / |sum x|
// of the column; tf32 GEMMs add 2 * 2^-11 kappa); the clip norm sums 42 squares and takes a square
// root (gamma_42 + 2 u), the clip factor divides by it; AdamW's m / sqrt(v) is scale-free, so the
// gradients' relative error eps moves it by 2 eps, and |m / sqrt v| <= sqrt(steps): each step
// moves w by at most lr sqrt(3) (2 eps + 10 u) beyond the 2 u |w| of its own roundings.
double column_sum_condition(const Tensor& x) {
  const std::vector<float> v = x.to_vector();
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  double worst = 1.0;
  for (int64_t k = 0; k < cols; ++k) {
    double sum = 0.0, mag = 0.0;
    for (int64_t r = 0; r < rows; ++r) sum += v[r * cols + k], mag += std::fabs(v[r * cols + k]);
    worst = std::max(worst, mag / std::fabs(sum));
  }
  return worst;
}

TEST(OpsOnCuda, AdamWAndClippingUpdateCudaParametersAsOnTheCpu) {
  using namespace cuda_testing;
  const Device cuda = emulated_cuda();
  Tensor w_cpu = random_tensor({7, 5}, 1), b_cpu = random_tensor({7}, 2);
  Tensor w_cuda = w_cpu.to(cuda), b_cuda = b_cpu.to(cuda);
  for (Tensor* t : {&w_cpu, &b_cpu, &w_cuda, &b_cuda}) t->set_requires_grad(true);
  AdamWOptions o;
  o.lr = 0.05f;
  o.weight_decay = 0.1f;
  AdamW opt_cpu({{"fc.weight", &w_cpu}, {"fc.bias", &b_cpu}}, o);
  AdamW opt_cuda({{"fc.weight", &w_cuda}, {"fc.bias", &b_cuda}}, o);
  const double gemm = 2 * Gamma(4, kF32) + (testing::device_gemms_in_tf32() ? Gamma(2, kTf32) : 0.0);
  double w_moved = 0.0, b_moved = 0.0, v_relative = 0.0;  // the bounds, accumulated over the steps
  for (int step = 0; step < 3; ++step) {
    const Tensor x = random_tensor({4, 5}, 50 + step, -3.0f, 3.0f);
    sum_all(linear(x, w_cpu, b_cpu)).backward();
    sum_all(linear(x.to(cuda), w_cuda, b_cuda)).backward();
    const float n_cpu = clip_grad_norm(std::vector<Tensor*>{&w_cpu, &b_cpu}, 1.0f);
    const float n_cuda = clip_grad_norm(std::vector<Tensor*>{&w_cuda, &b_cuda}, 1.0f);
    const double grad = gemm * column_sum_condition(x);           // dL/dW (dL/db = 4: exact)
    const double norm = grad + Gamma(42, kF32) + 2 * kF32;         // the clip norm
    EXPECT_NEAR(n_cuda, n_cpu, norm * n_cpu) << "step " << step;
    EXPECT_GT(n_cpu, 1.0f) << "the test should clip";
    const double clip = norm + 2 * kF32;                           // the clip factor
    w_moved += o.lr * std::sqrt(3.0) * (2 * (grad + clip) + 20 * kF32);
    b_moved += o.lr * std::sqrt(3.0) * (2 * clip + 20 * kF32);
    v_relative = std::max(v_relative, 2 * (grad + clip)) + 8 * kF32;
    opt_cpu.step();
    opt_cuda.step();
    opt_cpu.zero_grad();
    opt_cuda.zero_grad();
  }
  EXPECT_EQ(w_cuda.device(), cuda);
  auto largest = [](const Tensor& t) {
    double m = 0.0;
    for (float v : t.to_vector()) m = std::max(m, double(std::fabs(v)));
    return m;
  };
  EXPECT_LE(max_relative_difference(w_cuda.to_vector(), w_cpu.to_vector()), w_moved / largest(w_cpu) + 12 * kF32);
  EXPECT_LE(max_relative_difference(b_cuda.to_vector(), b_cpu.to_vector()), b_moved / largest(b_cpu) + 12 * kF32);
  EXPECT_LE(max_relative_difference(opt_cuda.state().params.at("fc.weight").exp_avg_sq.to_vector(),
                                    opt_cpu.state().params.at("fc.weight").exp_avg_sq.to_vector()),
            v_relative);
}

TEST(OpsOnCuda, GradientsOfASharedInputAccumulateOnTheDevice) {
  // x x + exp x: its gradient sums 3 contributions (2 x dy, exp(x) dy).
  expect_cuda_matches_cpu("x used three times", {{{4, 5}}},
                          [](auto& x) { return add(mul(x[0], x[0]), exp(x[0])); }, op_tolerance(4, 1));
}

TEST(OpsOnCuda, InputsOnTwoDevicesAreAnErrorNamingTheOpAndBothDevices) {
  const Device cuda = emulated_cuda();
  const Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({2, 3}, cuda);
  for (const auto& [op, fn] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add", [&] { add(a, b); }},
           {"matmul", [&] { matmul(a, b, false, true); }},
           {"concat", [&] { concat({a, b}, 0); }}}) {
    try {
      fn();
      ADD_FAILURE() << op << " accepted inputs on cpu and cuda:0";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(op), std::string::npos) << msg;
      EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    }
  }
}

TEST(OpsOnCuda, HostAccessToDeviceDataIsRefusedButCopiesWork) {
  const Device cuda = emulated_cuda();
  const Tensor t = Tensor::full({3}, 2.5f, cuda);
  EXPECT_THROW(t.f32(), Error);
  EXPECT_EQ(t.to_vector(), std::vector<float>(3, 2.5f));
  EXPECT_FLOAT_EQ(sum_all(t).item(), 7.5f);
}

TEST(OpsOnCuda, DeviceMemoryHasItsOwnCurrentAndPeakStatistics) {
  const Device cuda = emulated_cuda();
  const int64_t cpu_before = memory_stats().current_bytes;
  reset_peak_memory(cuda);
  const int64_t base = memory_stats(cuda).current_bytes;
  constexpr int64_t kFloats = 1 << 20;  // 4 MiB
  {
    const Tensor big = Tensor::zeros({kFloats}, cuda);
    EXPECT_GE(memory_stats(cuda).current_bytes, base + kFloats * 4);
    EXPECT_EQ(memory_stats().current_bytes, cpu_before) << "a device tensor was counted on the host";
  }
  const MemoryStats after = memory_stats(cuda);
  EXPECT_EQ(after.current_bytes, base) << "freeing the tensor must give its bytes back";
  EXPECT_GE(after.peak_bytes, base + kFloats * 4) << "the peak must remember the 4 MiB tensor";
  EXPECT_GE(after.cached_bytes, kFloats * 4) << "the freed block should stay cached for re-use";
  reset_peak_memory(cuda);
  EXPECT_EQ(memory_stats(cuda).peak_bytes, base);
}

}  // namespace
}  // namespace tarn
