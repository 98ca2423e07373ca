// The GPU attention benchmark (issue 7): linear attention (causal and bidirectional, f32 and
// bf16, elu1 feature map fused) and the causal gated delta rule (f32, issue 29) against the
// FlashAttention-style softmax baseline (f32, and bf16 on tensor cores), forward and forward +
// backward, on the roofline of the device it runs on.
// `cuda_attention_bench --help` gives the flags and the definition of every figure (kDescription).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/blas_info.h"
#include "kernels/check.h"
#include "kernels/delta_rule.h"
#include "kernels/cuda_delta_rule.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_runtime.h"
#include "kernels/cuda_softmax_attention.h"
#include "kernels/linear_attention.h"
#include "kernels/softmax_attention.h"
#include "tools/bench/common/gpu_peaks.h"
#include "tools/cli.h"

#if __has_include("kernels/cuda_linear_attention_bf16.h")
#include "kernels/cuda_linear_attention_bf16.h"
#include "kernels/cuda_softmax_attention_bf16.h"
#define TARN_BENCH_BF16 1
#else
namespace tarn {
struct bf16 {
  unsigned short bits;
};
}  // namespace tarn
#endif

#if defined(TARN_WITH_CUDA)
#include <cuda_runtime.h>
// The kernel `fn` on the GPU when `gpu`, on the emulator otherwise.
#define TARN_BENCH_ON(gpu, fn, ...) \
  ((gpu) ? ::tarn::kernels::cuda::fn(__VA_ARGS__) : ::tarn::kernels::cuda_emu::fn(__VA_ARGS__))
#else
#define TARN_BENCH_ON(gpu, fn, ...) ::tarn::kernels::cuda_emu::fn(__VA_ARGS__)
#endif

namespace {

namespace cpu = tarn::kernels::cpu;
namespace rt = tarn::kernels::cuda;

// The issue's H100 SXM figures.
constexpr double kH100Hbm = 3.35e12;  // bytes/s
constexpr double kH100F32 = 67e12;  // FLOP/s, f32 FMA
constexpr double kH100Bf16 = 989e12;  // FLOP/s, bf16 dense tensor cores
constexpr int kLinearChunk = 64;  // C of the linear FLOP count (as the CPU bench)
constexpr size_t kPatternFloats = 1 << 20;  // random values, repeated to fill big tensors

enum class Algo {
  linear_causal_f32,
  linear_bidir_f32,
  linear_causal_bf16,
  linear_bidir_bf16,
  softmax_causal,
  softmax_bidir,
  softmax_causal_bf16,
  softmax_bidir_bf16,
  delta_causal_f32,            // the kernels' automatic choice: chunked (WY form) where it fits
  delta_causal_f32_recurrent  // the token-by-token recurrence, forced
};
constexpr Algo kAllAlgos[] = {Algo::linear_causal_f32,   Algo::linear_bidir_f32, Algo::linear_causal_bf16,
                              Algo::linear_bidir_bf16,   Algo::softmax_causal,   Algo::softmax_bidir,
                              Algo::softmax_causal_bf16, Algo::softmax_bidir_bf16, Algo::delta_causal_f32,
                              Algo::delta_causal_f32_recurrent};

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::linear_causal_f32: return "linear_causal_f32";
    case Algo::linear_bidir_f32: return "linear_bidir_f32";
    case Algo::linear_causal_bf16: return "linear_causal_bf16";
    case Algo::linear_bidir_bf16: return "linear_bidir_bf16";
    case Algo::softmax_causal: return "softmax_causal_f32";
    case Algo::softmax_bidir: return "softmax_bidir_f32";
    case Algo::softmax_causal_bf16: return "softmax_causal_bf16";
    case Algo::softmax_bidir_bf16: return "softmax_bidir_bf16";
    case Algo::delta_causal_f32: return "delta_causal_f32";
    case Algo::delta_causal_f32_recurrent: return "delta_causal_f32_recurrent";
  }
  return "?";
}
bool is_bf16(Algo a) {
  return a == Algo::linear_causal_bf16 || a == Algo::linear_bidir_bf16 || a == Algo::softmax_causal_bf16 ||
         a == Algo::softmax_bidir_bf16;
}
bool is_softmax(Algo a) {
  return a == Algo::softmax_causal || a == Algo::softmax_bidir || a == Algo::softmax_causal_bf16 ||
         a == Algo::softmax_bidir_bf16;
}
bool is_delta(Algo a) { return a == Algo::delta_causal_f32 || a == Algo::delta_causal_f32_recurrent; }
tarn::kernels::DeltaRuleAlgorithm delta_algorithm(Algo a) {
  return a == Algo::delta_causal_f32_recurrent ? tarn::kernels::DeltaRuleAlgorithm::recurrent
                                               : tarn::kernels::DeltaRuleAlgorithm::automatic;
}
bool is_causal(Algo a) {
  return a == Algo::linear_causal_f32 || a == Algo::linear_causal_bf16 || a == Algo::softmax_causal ||
         a == Algo::softmax_causal_bf16 || is_delta(a);
}
bool available(Algo a) {
#if defined(TARN_BENCH_BF16)
  return true;
#else
  return !is_bf16(a);
#endif
}

float to_float(float x) { return x; }
float to_float(tarn::bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <typename T>
T from_float(float x);
template <>
float from_float<float>(float x) {
  return x;
}
template <>
tarn::bf16 from_float<tarn::bf16>(float x) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return tarn::bf16{static_cast<unsigned short>(u >> 16)};
}

// n values of T: device memory on the GPU, host memory for the emulator.
template <typename T>
class Buffer {
 public:
  Buffer(bool gpu, size_t n) : gpu_(gpu), n_(n) {
    if (gpu_)
      ptr_ = static_cast<T*>(rt::device_malloc(std::max<size_t>(n, 1) * sizeof(T), 0));
    else
      host_.assign(n, T{}), ptr_ = host_.data();
  }
  ~Buffer() {
    if (gpu_) rt::device_free(ptr_, 0);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  // Fills the buffer with `pattern` repeated (copies that double on the device).
  void fill(const std::vector<T>& pattern) {
    const size_t first = std::min(n_, pattern.size());
    if (!gpu_) {
      for (size_t i = 0; i < n_; ++i) host_[i] = pattern[i % pattern.size()];
      return;
    }
    if (first) rt::copy_host_to_device(ptr_, pattern.data(), first * sizeof(T), 0);
    for (size_t done = first; done < n_;) {
      const size_t m = std::min(done, n_ - done);
      rt::copy_device_to_device(ptr_ + done, ptr_, m * sizeof(T), 0);
      done += m;
    }
  }
  std::vector<float> floats() const {
    std::vector<T> h(n_);
    if (gpu_) {
      if (n_) rt::copy_device_to_host(h.data(), ptr_, n_ * sizeof(T), 0);
    } else {
      h = host_;
    }
    std::vector<float> f(n_);
    for (size_t i = 0; i < n_; ++i) f[i] = to_float(h[i]);
    return f;
  }

 private:
  bool gpu_;
  size_t n_;
  std::vector<T> host_;
  T* ptr_ = nullptr;
};

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

template <typename T>
std::vector<T> converted(const std::vector<float>& f) {
  std::vector<T> t(f.size());
  for (size_t i = 0; i < f.size(); ++i) t[i] = from_float<T>(f[i]);
  return t;
}

// The pattern's rows of width d scaled to unit length (the pattern's size is a multiple of d).
std::vector<float> unit_rows(std::vector<float> x, int64_t d) {
  for (size_t r = 0; r + d <= x.size(); r += d) {
    double norm = 0;
    for (int64_t i = 0; i < d; ++i) norm += double(x[r + i]) * x[r + i];
    for (int64_t i = 0; i < d; ++i) x[r + i] = static_cast<float>(x[r + i] / std::sqrt(norm));
  }
  return x;
}
// The delta rule's beta in (0.1, 0.9) and alpha in (0.9, 1), a pattern of 4096 values.
std::vector<float> delta_beta() { return random_floats(4096, 0.1f, 0.9f, 15); }
std::vector<float> delta_alpha() { return random_floats(4096, 0.9f, 1.0f, 16); }

struct Shape {
  int64_t bh, n, d, e;
};

// One algorithm on one shape: its tensors and its forward and backward calls. The inputs are
// random patterns (q, k in [-1, 1]: raw queries and keys, elu1 applied inside the linear kernels).
struct RunBase {
  virtual ~RunBase() = default;
  virtual void forward() = 0;
  virtual void backward() = 0;
  // out, aux (lse or den), dq, dk, dv as floats, for the check.
  virtual std::vector<std::vector<float>> results() const = 0;
};

template <typename T>
struct Run : RunBase {
  Algo algo;
  bool gpu;
  Shape s;
  Buffer<T> q, k, v, out, dout, dq, dk, dv;
  Buffer<float> aux, ws;
  // The delta rule's gates, its d_alpha (aux holds d_beta) and its checkpoints; empty otherwise.
  Buffer<float> beta, alpha, d_alpha, checkpoints;
  cpu::DeltaRuleDims ddims;
  cpu::DeltaRuleConfig dcfg;
  cpu::LinearAttentionDims ldims;
  cpu::LinearAttentionConfig lcfg;
  cpu::SoftmaxAttentionDims sdims;
  cpu::SoftmaxAttentionConfig scfg;

  Run(Algo a, bool on_gpu, const Shape& sh, const std::vector<float> (&data)[4])
      : algo(a), gpu(on_gpu), s(sh), q(on_gpu, sh.bh * sh.n * sh.d), k(on_gpu, sh.bh * sh.n * sh.d),
        v(on_gpu, sh.bh * sh.n * sh.e), out(on_gpu, sh.bh * sh.n * sh.e), dout(on_gpu, sh.bh * sh.n * sh.e),
        dq(on_gpu, sh.bh * sh.n * sh.d), dk(on_gpu, sh.bh * sh.n * sh.d), dv(on_gpu, sh.bh * sh.n * sh.e),
        aux(on_gpu, sh.bh * sh.n), ws(on_gpu, workspace_floats(a, on_gpu, sh)),
        beta(on_gpu, is_delta(a) ? sh.bh * sh.n : 0), alpha(on_gpu, is_delta(a) ? sh.bh * sh.n : 0),
        d_alpha(on_gpu, is_delta(a) ? sh.bh * sh.n : 0),
        checkpoints(on_gpu, is_delta(a) ? delta_checkpoint_floats(sh) : 0) {
    ddims = {sh.bh, sh.n, sh.d, sh.e};
    ldims = {1, sh.bh, sh.n, sh.n, sh.d, sh.e};
    lcfg.causal = is_causal(a);
    lcfg.feature_map = cpu::FeatureMap::elu1;
    sdims = {1, sh.bh, sh.n, sh.n, sh.d, sh.e};
    scfg.causal = is_causal(a);
    // The delta rule takes unit-length q and k rows (its layer normalises them) and gates.
    q.fill(converted<T>(is_delta(a) ? unit_rows(data[0], sh.d) : data[0]));
    k.fill(converted<T>(is_delta(a) ? unit_rows(data[1], sh.d) : data[1]));
    if (is_delta(a)) {
      beta.fill(delta_beta());
      alpha.fill(delta_alpha());
    }
    v.fill(converted<T>(data[2]));
    dout.fill(converted<T>(data[3]));
  }

  static size_t delta_checkpoint_floats(const Shape& sh) {
    const cpu::DeltaRuleDims dd{sh.bh, sh.n, sh.d, sh.e};
    return static_cast<size_t>(sh.bh * cpu::delta_rule_checkpoints(dd, cpu::DeltaRuleConfig{}) * sh.d * sh.e);
  }

  static size_t workspace_floats(Algo a, bool on_gpu, const Shape& sh) {
    if (is_delta(a))
      return TARN_BENCH_ON(on_gpu, delta_rule_backward_workspace_floats, cpu::DeltaRuleDims{sh.bh, sh.n, sh.d, sh.e},
                           cpu::DeltaRuleConfig{});
    const cpu::LinearAttentionDims ld{1, sh.bh, sh.n, sh.n, sh.d, sh.e};
    cpu::LinearAttentionConfig lc;
    lc.causal = is_causal(a);
    lc.feature_map = cpu::FeatureMap::elu1;
    const cpu::SoftmaxAttentionDims sd{1, sh.bh, sh.n, sh.n, sh.d, sh.e};
    cpu::SoftmaxAttentionConfig sc;
    sc.causal = is_causal(a);
#if defined(TARN_BENCH_BF16)
    if (is_softmax(a) && is_bf16(a))
      return std::max(TARN_BENCH_ON(on_gpu, softmax_attention_bf16_forward_workspace_floats, sd, sc),
                      TARN_BENCH_ON(on_gpu, softmax_attention_bf16_backward_workspace_floats, sd, sc));
#endif
    if (is_softmax(a))
      return std::max(TARN_BENCH_ON(on_gpu, softmax_attention_forward_workspace_floats, sd, sc),
                      TARN_BENCH_ON(on_gpu, softmax_attention_backward_workspace_floats, sd, sc));
#if defined(TARN_BENCH_BF16)
    if (is_bf16(a))
      return std::max(TARN_BENCH_ON(on_gpu, linear_attention_bf16_forward_workspace_floats, ld, lc),
                      TARN_BENCH_ON(on_gpu, linear_attention_bf16_backward_workspace_floats, ld, lc));
#endif
    return std::max(TARN_BENCH_ON(on_gpu, linear_attention_forward_workspace_floats, ld, lc),
                    TARN_BENCH_ON(on_gpu, linear_attention_backward_workspace_floats, ld, lc));
  }

  void forward() override;
  void backward() override;
  std::vector<std::vector<float>> results() const override {
    return {out.floats(), aux.floats(), dq.floats(), dk.floats(), dv.floats()};
  }
};

template <>
void Run<float>::forward() {
  if (is_delta(algo)) TARN_BENCH_ON(gpu, delta_rule_set_algorithm, delta_algorithm(algo));
  if (is_delta(algo))
    TARN_BENCH_ON(gpu, delta_rule_forward, ddims, dcfg, q.get(), k.get(), v.get(), beta.get(), alpha.get(), out.get(),
                  nullptr, checkpoints.get());
  else if (is_softmax(algo))
    TARN_BENCH_ON(gpu, softmax_attention_forward, sdims, scfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  ws.get(), ws.size());
  else
    TARN_BENCH_ON(gpu, linear_attention_forward, ldims, lcfg, q.get(), k.get(), v.get(), out.get(), aux.get(), ws.get(),
                  ws.size());
}

template <>
void Run<float>::backward() {
  if (is_delta(algo)) TARN_BENCH_ON(gpu, delta_rule_set_algorithm, delta_algorithm(algo));
  if (is_delta(algo))
    TARN_BENCH_ON(gpu, delta_rule_backward, ddims, dcfg, q.get(), k.get(), v.get(), beta.get(), alpha.get(),
                  checkpoints.get(), dout.get(), nullptr, dq.get(), dk.get(), dv.get(), aux.get(), d_alpha.get(),
                  ws.get(), ws.size());
  else if (is_softmax(algo))
    TARN_BENCH_ON(gpu, softmax_attention_backward, sdims, scfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  dout.get(), dq.get(), dk.get(), dv.get(), ws.get(), ws.size());
  else
    TARN_BENCH_ON(gpu, linear_attention_backward, ldims, lcfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  dout.get(), dq.get(), dk.get(), dv.get(), ws.get(), ws.size());
}

template <>
void Run<tarn::bf16>::forward() {
#if defined(TARN_BENCH_BF16)
  if (is_softmax(algo))
    TARN_BENCH_ON(gpu, softmax_attention_bf16_forward, sdims, scfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  ws.get(), ws.size());
  else
    TARN_BENCH_ON(gpu, linear_attention_bf16_forward, ldims, lcfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  ws.get(), ws.size());
#endif
}

template <>
void Run<tarn::bf16>::backward() {
#if defined(TARN_BENCH_BF16)
  if (is_softmax(algo))
    TARN_BENCH_ON(gpu, softmax_attention_bf16_backward, sdims, scfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  dout.get(), dq.get(), dk.get(), dv.get(), ws.get(), ws.size());
  else
    TARN_BENCH_ON(gpu, linear_attention_bf16_backward, ldims, lcfg, q.get(), k.get(), v.get(), out.get(), aux.get(),
                  dout.get(), dq.get(), dk.get(), dv.get(), ws.get(), ws.size());
#endif
}

std::unique_ptr<RunBase> make_run(Algo a, bool gpu, const Shape& s, const std::vector<float> (&data)[4]) {
  if (is_bf16(a)) return std::make_unique<Run<tarn::bf16>>(a, gpu, s, data);
  return std::make_unique<Run<float>>(a, gpu, s, data);
}

// The inputs: q, k (raw, either sign), v, dout; `n` values each, repeated to fill the tensors.
void make_inputs(size_t n, std::vector<float> (&data)[4]) {
  data[0] = random_floats(n, -1.0f, 1.0f, 11);
  data[1] = random_floats(n, -1.0f, 1.0f, 12);
  data[2] = random_floats(n, -1.0f, 1.0f, 13);
  data[3] = random_floats(n, -1.0f, 1.0f, 14);
}

// max |got - want| / max |want| (infinities, where lse is +inf, must match exactly).
double scaled_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0.0, scale = 1e-30;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      if (!(got[i] == want[i])) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / scale);
  }
  return worst;
}

// One small shape (N not a multiple of any tile) against the CPU kernel; returns whether every
// output and gradient is within tolerance (1e-4 f32; 3e-2 bf16, whose inputs the CPU also gets
// rounded to bf16).
bool check(Algo a, bool gpu) {
  const Shape s{3, 70, 32, 40};
  std::vector<float> data[4];
  make_inputs(s.bh * s.n * std::max(s.d, s.e), data);
  auto run = make_run(a, gpu, s, data);
  run->forward();
  run->backward();
  const auto got = run->results();

  // The CPU on the values the kernel saw (bf16-rounded for the bf16 kernels).
  auto seen = [&](const std::vector<float>& x, size_t n) {
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i)
      r[i] = is_bf16(a) ? to_float(from_float<tarn::bf16>(x[i % x.size()])) : x[i % x.size()];
    return r;
  };
  const auto q = seen(data[0], s.bh * s.n * s.d), k = seen(data[1], s.bh * s.n * s.d);
  const auto v = seen(data[2], s.bh * s.n * s.e), dout = seen(data[3], s.bh * s.n * s.e);
  std::vector<float> out(s.bh * s.n * s.e), aux(s.bh * s.n), dq(q.size()), dk(k.size()), dv(v.size());
  if (is_delta(a)) {  // aux is d_beta
    const cpu::DeltaRuleDims dims{s.bh, s.n, s.d, s.e};
    const cpu::DeltaRuleConfig cfg;
    const auto qd = unit_rows(q, s.d), kd = unit_rows(k, s.d);
    const auto beta = seen(delta_beta(), s.bh * s.n), alpha = seen(delta_alpha(), s.bh * s.n);  // f32: repeated
    std::vector<float> chk(s.bh * cpu::delta_rule_checkpoints(dims, cfg) * s.d * s.e), d_alpha(s.bh * s.n);
    std::vector<float> ws(cpu::delta_rule_backward_workspace_floats(dims, cfg));
    cpu::delta_rule_forward(dims, cfg, qd.data(), kd.data(), v.data(), beta.data(), alpha.data(), out.data(), nullptr,
                            chk.data());
    cpu::delta_rule_backward(dims, cfg, qd.data(), kd.data(), v.data(), beta.data(), alpha.data(), chk.data(),
                             dout.data(), nullptr, dq.data(), dk.data(), dv.data(), aux.data(), d_alpha.data(),
                             ws.data(), ws.size());
  } else if (is_softmax(a)) {
    const cpu::SoftmaxAttentionDims dims{1, s.bh, s.n, s.n, s.d, s.e};
    cpu::SoftmaxAttentionConfig cfg;
    cfg.causal = is_causal(a);
    std::vector<float> ws(cpu::softmax_attention_forward_workspace_floats(dims, cfg));
    cpu::softmax_attention_forward(dims, cfg, q.data(), k.data(), v.data(), out.data(), aux.data(), ws.data(),
                                   ws.size());
    ws.assign(cpu::softmax_attention_backward_workspace_floats(dims, cfg), 0.0f);
    cpu::softmax_attention_backward(dims, cfg, q.data(), k.data(), v.data(), out.data(), aux.data(), dout.data(),
                                    dq.data(), dk.data(), dv.data(), ws.data(), ws.size());
  } else {
    const cpu::LinearAttentionDims dims{1, s.bh, s.n, s.n, s.d, s.e};
    cpu::LinearAttentionConfig cfg;
    cfg.causal = is_causal(a);
    cfg.feature_map = cpu::FeatureMap::elu1;
    std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(dims, cfg));
    cpu::linear_attention_forward(dims, cfg, q.data(), k.data(), v.data(), out.data(), aux.data(), ws.data(),
                                  ws.size());
    ws.assign(cpu::linear_attention_backward_workspace_floats(dims, cfg), 0.0f);
    cpu::linear_attention_backward(dims, cfg, q.data(), k.data(), v.data(), out.data(), aux.data(), dout.data(),
                                   dq.data(), dk.data(), dv.data(), ws.data(), ws.size());
  }
  // The GPU's backward starts from its own out (and lse / den): the check covers the pair.
  const std::vector<float>* want[] = {&out, &aux, &dq, &dk, &dv};
  const char* names[] = {"out", is_delta(a) ? "d_beta" : is_softmax(a) ? "lse" : "den", "dq", "dk", "dv"};
  const double tol = is_bf16(a) ? 3e-2 : 1e-4;
  bool ok = true;
  std::ostringstream detail;
  for (int i = 0; i < 5; ++i) {
    const double err = scaled_error(got[i], *want[i]);
    detail << " " << names[i] << " " << err;
    ok = ok && err <= tol;
  }
  std::printf(
      "# check %-19s on the %s, B*H=%lld N=%lld d=%lld e=%lld vs CPU: max error / max |value|:%s (tolerance %.0e)%s\n",
      algo_name(a), gpu ? "GPU" : "emulator", (long long)s.bh, (long long)s.n, (long long)s.d, (long long)s.e,
      detail.str().c_str(), tol, ok ? "" : "  MISMATCH");
  return ok;
}

constexpr const char* kDescription = R"(Linear attention (causal and bidirectional, f32 and bf16, elu1 feature map fused)
and the causal gated delta rule (f32; chunked and recurrent) against the FlashAttention-style softmax baseline (f32, and bf16 on tensor cores), forward and
forward + backward, on the roofline of the device it runs on (issue 7).

The delta rule's inputs are unit q, k rows, beta in (0.1, 0.9) and alpha in (0.9, 1); its
check compares d_beta where the others compare lse or den.

First every kernel is checked against the CPU kernel on one small shape (max |got - want| /
max |want| of every output and gradient): on the GPU when there is one, else on the CUDA
emulator, which is all this bench does without a GPU (timings need one). Then, on a GPU, each
algorithm is timed for N = 1K..64K (as far as memory allows), B*H = 4 and 128, d = e = 64 and
128, as CSV:
  fwd_ms, fwdbwd_ms   median over repeats of CUDA-event times of forward, and of forward then
                      backward; before each timed run a buffer of twice the L2 size is
                      written, so that no input is served from L2
  tflops              FLOP / time. Softmax: 4 Nq Nk d forward (2 Nq Nk (d + e) when e != d),
                      halved when causal; backward 2.5x forward (S recomputed, dP, dV, dK, dQ).
                      Linear: kernels/linear_attention.h's count for the chunked algorithm with
                      C = 64 rows per chunk, as tools/bench/attention_bench.cpp (per chunk of r
                      rows: forward 4 r d (e+1) + 2 r(r+1)/2 (d + e + 1), backward 10 r d (e+1)
                      + 6 r(r+1)/2 (d + e + 1); bidirectional 2 (Nq + Nk) d (e+1) forward).
                      Delta rule: the token-by-token recurrence's count for both of its
                      algorithms (delta_causal_f32: the kernels' choice, the chunked WY form
                      where it fits; delta_causal_f32_recurrent: the recurrence forced), per
                      token 6 d e forward (S^T k, the rank-1 write, the readout) and 21 d e
                      backward (the chunk's states recomputed, dq, dS, dw, dk, d_alpha and dS's
                      update): the same work done, so the two compare by time.
  gbps                compulsory bytes / time: the tensors the API reads and writes, once each
                      (forward q, k, v -> out, lse or den; backward q, k, v, out, lse or den,
                      dout -> dq, dk, dv), at 4 bytes (f32) or 2 (bf16; den stays f32); the
                      delta rule's gates and checkpoints are left out.
  of_roofline         max(bytes / HBM bandwidth, FLOP / peak) / time: 1 is the roofline. Peaks
                      from the device (tools/bench/common/gpu_peaks.h): f32 FMA, bf16 dense
                      tensor cores, HBM. of_h100 uses the issue's H100 figures instead: 3.35 TB/s,
                      67 TFLOP/s f32 FMA, 989 TFLOP/s bf16 dense.
The issue's target: B*H = 128, N = 4096, d = 64 at >= 50% of the roofline; printed at the end.)";

struct Options {
  bool quick = false;
  bool skip_check = false;
  int64_t min_n = 1024;
  int64_t max_n = 65536;
  int repeats = 7;
  double max_ms = 4000;
  std::vector<std::string> algo_names;
  std::vector<Algo> algos;  // from algo_names
};

void add_flags(CLI::App& app, Options& o) {
  for (Algo a : kAllAlgos) o.algo_names.push_back(algo_name(a));
  app.add_flag("--quick", o.quick, "B*H = 128, d = 64, N = 1K and 4K only (includes the target shape)");
  tarn::cli::add_integer(app, "--min-n", o.min_n, 1, 1 << 30, "shortest sequence length timed");
  tarn::cli::add_integer(app, "--max-n", o.max_n, 1, 1 << 30, "longest sequence length timed");
  tarn::cli::add_integer(app, "--repeats", o.repeats, 1, 1000, "timed runs per figure", "R");
  tarn::cli::add_real(app, "--max-ms", o.max_ms, 0, 1e9,
                      "once a forward + backward of an algorithm takes longer than T ms, its longer sequences at that "
                      "B*H and d are skipped (softmax is quadratic in N: at B*H = 128, N = 64K, d = 128 one pass "
                      "takes tens of seconds), so that the sweep ends in minutes",
                      "T");
  tarn::cli::add_list(app, "--algos", o.algo_names, "the algorithms to check and time", tarn::cli::one_of(o.algo_names))
      ->default_str("all");
  app.add_flag("--skip-check", o.skip_check,
               "time without the check on a small shape first, so that the first launch of each kernel is a timed "
               "one (what a profiler given --launch-count 1 should see: tools/gpu_check.sh runs ncu on "
               "`--quick --min-n 4096 --skip-check`)");
}

// FLOP and compulsory bytes of one pass (see the header comment).
double flops_of(Algo a, const Shape& s, bool backward) {
  if (is_delta(a))  // the token-by-token recurrence (see the description)
    return (backward ? 21.0 : 6.0) * double(s.bh) * double(s.n) * double(s.d) * double(s.e);
  if (is_softmax(a)) {
    const double pairs = double(s.n) * double(s.n) * (is_causal(a) ? 0.5 : 1.0);
    const double fwd = 2.0 * pairs * double(s.d + s.e) * double(s.bh);
    return backward ? 2.5 * fwd : fwd;
  }
  const cpu::LinearAttentionDims dims{1, s.bh, s.n, s.n, s.d, s.e};
  cpu::LinearAttentionConfig cfg;
  cfg.causal = is_causal(a);
  cfg.chunk = kLinearChunk;
  return cpu::linear_attention_flops(dims, cfg, backward);
}

double bytes_of(Algo a, const Shape& s, bool backward) {
  const double t = is_bf16(a) ? 2.0 : 4.0, bh = double(s.bh), n = double(s.n);
  const double inputs = t * bh * n * (2 * s.d + s.e), aux = 4.0 * bh * n;
  if (!backward) return inputs + t * bh * n * s.e + aux;  // q, k, v -> out, lse/den
  return inputs + 2 * t * bh * n * s.e + aux + t * bh * n * (2 * s.d + s.e);  // + out, dout -> dq, dk, dv
}

}  // namespace

#if defined(TARN_WITH_CUDA)
namespace {

struct Peaks {
  double f32 = 0, bf16 = 0, hbm = 0;
};

// Median milliseconds of fn over the repeats, each timed with events after writing `flush`
// (larger than L2) so that the inputs come from HBM; one untimed run first. Fewer repeats for
// runs that take seconds.
double time_ms(const std::function<void()>& fn, int repeats, void* flush, size_t flush_bytes) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  fn();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float first = 0;
  cudaEventElapsedTime(&first, start, stop);
  if (first > 2000)
    repeats = 1;
  else if (first > 300)
    repeats = std::min(repeats, 3);
  std::vector<float> ms(repeats);
  for (int r = 0; r < repeats; ++r) {
    cudaMemsetAsync(flush, r & 0xff, flush_bytes);
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[r], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const cudaError_t err = cudaGetLastError();
  TARN_CHECK(err == cudaSuccess, "cuda_attention_bench: ", cudaGetErrorString(err));
  std::sort(ms.begin(), ms.end());
  return ms[repeats / 2];
}

// Device bytes one run allocates (tensors and workspace), to skip shapes that do not fit.
double run_bytes(Algo a, const Shape& s) {
  const double t = is_bf16(a) ? 2.0 : 4.0;
  const double tensors = t * s.bh * s.n * (4.0 * s.d + 4.0 * s.e);  // q k dq dk, v out dout dv
  if (is_delta(a))  // + gates, checkpoints every 32 tokens, the backward's 33 states a slice
    return tensors + 4.0 * s.bh * (4.0 * s.n + (s.n / 32.0 + 1 + 33) * s.d * s.e);
  return tensors + 4.0 * s.bh * s.n * (s.e + 2.0);  // aux + workspace (at most (e+1) per row)
}

int time_all(const Options& o) {
  const tarn::bench::GpuPeaks dev = tarn::bench::query_gpu_peaks(0);
  Peaks pk;
  pk.f32 = dev.f32_flops;
  pk.bf16 = dev.bf16_flops;
  pk.hbm = dev.bytes_per_s;
  std::printf(
      "# device: %s (sm_%d%d), %d SMs at %.2f GHz, L2 %lld MiB, %.1f GiB; peaks from these: f32 FMA %.1f "
      "TFLOP/s, bf16 dense %.0f TFLOP/s, HBM %.2f TB/s\n",
      dev.name.c_str(), dev.major, dev.minor, dev.sms, dev.clock_hz / 1e9, dev.l2_bytes >> 20,
      dev.memory_bytes / double(1 << 30), pk.f32 / 1e12, pk.bf16 / 1e12, pk.hbm / 1e12);
  std::printf("# H100 (issue 7): HBM 3.35 TB/s, f32 FMA 67 TFLOP/s, bf16 dense 989 TFLOP/s\n");

  const size_t flush_bytes = std::max<size_t>(size_t(2) * dev.l2_bytes, size_t(64) << 20);
  void* flush = rt::device_malloc(flush_bytes, 0);

  std::vector<int64_t> ns;
  for (int64_t n = 1024; n <= std::min<int64_t>(o.max_n, 65536); n *= 2)
    if ((!o.quick || n == 1024 || n == 4096) && n >= o.min_n) ns.push_back(n);
  const std::vector<int64_t> bhs = o.quick ? std::vector<int64_t>{128} : std::vector<int64_t>{4, 128};
  const std::vector<int64_t> ds = o.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 128};

  std::vector<float> data[4];
  make_inputs(kPatternFloats, data);
  std::printf(
      "algo,bh,n,d,e,fwd_ms,fwdbwd_ms,fwd_tflops,fwdbwd_tflops,fwd_gbps,fwdbwd_gbps,fwd_bound,fwdbwd_bound,"
      "fwd_of_roofline,fwdbwd_of_roofline,fwd_of_h100,fwdbwd_of_h100\n");
  std::ostringstream target, versus;
  struct Timed {
    Algo algo;
    int64_t bh, n, d;
    double fb_ms;
  };
  std::vector<Timed> timed;
  for (int64_t d : ds)
    for (int64_t bh : bhs) {
      std::vector<Algo> too_slow;  // forward + backward took over --max-ms at a shorter N
      for (int64_t n : ns)
        for (Algo a : o.algos) {
          if (!available(a)) continue;
          const Shape s{bh, n, d, d};
          if (std::find(too_slow.begin(), too_slow.end(), a) != too_slow.end()) {
            std::printf("# %s B*H=%lld N=%lld d=%lld: skipped (a shorter N took over --max-ms %.0f ms)\n", algo_name(a),
                        (long long)bh, (long long)n, (long long)d, o.max_ms);
            continue;
          }
          size_t free_b = 0, total_b = 0;
          cudaMemGetInfo(&free_b, &total_b);
          if (run_bytes(a, s) > 0.9 * double(free_b)) {
            std::printf("# %s B*H=%lld N=%lld d=%lld: needs %.1f GiB, %.1f GiB free: skipped\n", algo_name(a),
                        (long long)bh, (long long)n, (long long)d, run_bytes(a, s) / double(1 << 30),
                        free_b / double(1 << 30));
            continue;
          }
          auto run = make_run(a, true, s, data);
          const double fwd_ms = time_ms([&] { run->forward(); }, o.repeats, flush, flush_bytes);
          const double fb_ms = time_ms(
              [&] {
                run->forward();
                run->backward();
              },
              o.repeats, flush, flush_bytes);
          const double ff = flops_of(a, s, false), fb = ff + flops_of(a, s, true);
          const double bf = bytes_of(a, s, false), bb = bf + bytes_of(a, s, true);
          const double peak = is_bf16(a) ? pk.bf16 : pk.f32, h100 = is_bf16(a) ? kH100Bf16 : kH100F32;
          auto bound_s = [](double flops, double bytes, double p, double bw) {
            return std::max(flops / p, bytes / bw);
          };
          auto bound_name = [&](double flops, double bytes) {
            return flops / peak > bytes / pk.hbm ? "compute" : "memory";
          };
          const double fwd_frac = bound_s(ff, bf, peak, pk.hbm) / (fwd_ms * 1e-3);
          const double fb_frac = bound_s(fb, bb, peak, pk.hbm) / (fb_ms * 1e-3);
          std::printf("%s,%lld,%lld,%lld,%lld,%.3f,%.3f,%.2f,%.2f,%.1f,%.1f,%s,%s,%.3f,%.3f,%.3f,%.3f\n", algo_name(a),
                      (long long)bh, (long long)n, (long long)d, (long long)d, fwd_ms, fb_ms,
                      ff / (fwd_ms * 1e-3) / 1e12, fb / (fb_ms * 1e-3) / 1e12, bf / (fwd_ms * 1e-3) / 1e9,
                      bb / (fb_ms * 1e-3) / 1e9, bound_name(ff, bf), bound_name(fb, bb), fwd_frac, fb_frac,
                      bound_s(ff, bf, h100, kH100Hbm) / (fwd_ms * 1e-3),
                      bound_s(fb, bb, h100, kH100Hbm) / (fb_ms * 1e-3));
          std::fflush(stdout);
          if (fb_ms > o.max_ms) too_slow.push_back(a);
          // Softmax's forward + backward time over linear attention's, same masking, same shape.
          if (!is_softmax(a)) {
            for (const Timed& t : timed)
              if (t.bh == bh && t.n == n && t.d == d && is_causal(t.algo) == is_causal(a) && is_softmax(t.algo) &&
                  is_bf16(t.algo) == is_bf16(a))
                versus << "#   " << algo_name(a) << " B*H=" << bh << " N=" << n << " d=" << d << ": " << t.fb_ms / fb_ms
                       << "x faster than " << algo_name(t.algo) << "\n";
          } else {
            for (const Timed& t : timed)
              if (t.bh == bh && t.n == n && t.d == d && is_causal(t.algo) == is_causal(a) && !is_softmax(t.algo) &&
                  is_bf16(t.algo) == is_bf16(a))
                versus << "#   " << algo_name(t.algo) << " B*H=" << bh << " N=" << n << " d=" << d << ": "
                       << fb_ms / t.fb_ms << "x faster than " << algo_name(a) << "\n";
          }
          timed.push_back({a, bh, n, d, fb_ms});
          if (bh == 128 && n == 4096 && d == 64)
            target << "#   " << algo_name(a) << ": forward " << fwd_frac << ", forward+backward " << fb_frac
                   << (std::min(fwd_frac, fb_frac) >= 0.5 ? "" : "  (below the target)") << "\n";
        }
    }
  rt::device_free(flush, 0);
  if (!versus.str().empty())
    std::printf("# linear attention against the softmax baseline, forward + backward time:\n%s", versus.str().c_str());
  if (!target.str().empty())
    std::printf("# target (issue 7): B*H=128 N=4096 d=64 at >= 0.5 of the roofline on this device:\n%s",
                target.str().c_str());
  return 0;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  tarn::kernels::restart_with_better_blas_kernels(argv);
  CLI::App app(kDescription, "cuda_attention_bench");
  tarn::cli::configure(app);
  Options o;
  add_flags(app, o);
  if (const std::optional<int> status = tarn::cli::parse(app, argc, argv)) return *status;
  for (const std::string& name : o.algo_names)
    for (Algo a : kAllAlgos)
      if (name == algo_name(a)) o.algos.push_back(a);
  try {
    bool gpu = false;
#if defined(TARN_WITH_CUDA)
    gpu = rt::device_count() > 0;
#endif
    bool ok = true;
    for (Algo a : o.algos) {
      if (!available(a)) {
        std::printf("# %s: not built (no kernels/cuda_linear_attention_bf16.h)\n", algo_name(a));
        continue;
      }
      if (!o.skip_check) ok = check(a, gpu) && ok;
    }
    if (!ok) {
      std::printf("# the CUDA kernels disagree with the CPU: not timing them\n");
      return 1;
    }
    if (!gpu) {
      std::printf("# no CUDA device%s: the kernels were checked on the emulator; timings need a GPU\n",
                  rt::backend_built() ? "" : " (tarn built without CUDA)");
      return 0;
    }
#if defined(TARN_WITH_CUDA)
    return time_all(o);
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
