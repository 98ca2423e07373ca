// The GPU attention benchmark (issue 7): linear attention (causal and bidirectional, f32 and
// bf16, elu1 feature map fused) and the causal gated delta rule (f32, issue 29; bf16 on tensor
// cores) against the FlashAttention-style softmax baseline (f32, and bf16 on tensor cores),
// forward and forward + backward, on the roofline of the device it runs on. With --json it also
// writes its rows as JSON (tools/gpu_check.sh perf merges them with PyTorch's and FLA's timings:
// tools/gpu_perf.py, docs/experiment/gpu_perf.md).
// `cuda_attention_bench --help` gives the flags and the definition of every figure (kDescription).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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
#include "tools/bench/common/bench_util.h"
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
#if defined(TARN_BENCH_BF16) && __has_include("kernels/cuda_delta_rule_bf16.h")
#include "kernels/cuda_delta_rule_bf16.h"
#define TARN_BENCH_DELTA_BF16 1
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
  linear_causal_bf16,       // chunk-parallel (kernels/cuda/linear_attention_chunked_bf16.cu) where it applies
  linear_causal_bf16_scan,  // the chunked scan kernels, forced (the path before the chunk-parallel one)
  linear_bidir_bf16,
  softmax_causal,
  softmax_bidir,
  softmax_causal_bf16,
  softmax_bidir_bf16,
  delta_causal_f32,            // the kernels' automatic choice: chunked (WY form) where it fits
  delta_causal_f32_recurrent,  // the token-by-token recurrence, forced
  delta_causal_bf16            // the chunked (WY) form with its products on tensor cores
};
constexpr Algo kAllAlgos[] = {Algo::linear_causal_f32,   Algo::linear_bidir_f32,   Algo::linear_causal_bf16,
                              Algo::linear_causal_bf16_scan, Algo::linear_bidir_bf16,   Algo::softmax_causal,     Algo::softmax_bidir,
                              Algo::softmax_causal_bf16, Algo::softmax_bidir_bf16, Algo::delta_causal_f32,
                              Algo::delta_causal_f32_recurrent, Algo::delta_causal_bf16};

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::linear_causal_f32: return "linear_causal_f32";
    case Algo::linear_bidir_f32: return "linear_bidir_f32";
    case Algo::linear_causal_bf16: return "linear_causal_bf16";
    case Algo::linear_causal_bf16_scan: return "linear_causal_bf16_scan";
    case Algo::linear_bidir_bf16: return "linear_bidir_bf16";
    case Algo::softmax_causal: return "softmax_causal_f32";
    case Algo::softmax_bidir: return "softmax_bidir_f32";
    case Algo::softmax_causal_bf16: return "softmax_causal_bf16";
    case Algo::softmax_bidir_bf16: return "softmax_bidir_bf16";
    case Algo::delta_causal_f32: return "delta_causal_f32";
    case Algo::delta_causal_f32_recurrent: return "delta_causal_f32_recurrent";
    case Algo::delta_causal_bf16: return "delta_causal_bf16";
  }
  return "?";
}
bool is_bf16(Algo a) {
  return a == Algo::linear_causal_bf16 || a == Algo::linear_causal_bf16_scan || a == Algo::linear_bidir_bf16 ||
         a == Algo::softmax_causal_bf16 || a == Algo::softmax_bidir_bf16 || a == Algo::delta_causal_bf16;
}
bool is_softmax(Algo a) {
  return a == Algo::softmax_causal || a == Algo::softmax_bidir || a == Algo::softmax_causal_bf16 ||
         a == Algo::softmax_bidir_bf16;
}
bool is_delta(Algo a) {
  return a == Algo::delta_causal_f32 || a == Algo::delta_causal_f32_recurrent || a == Algo::delta_causal_bf16;
}
tarn::kernels::DeltaRuleAlgorithm delta_algorithm(Algo a) {
  return a == Algo::delta_causal_f32_recurrent ? tarn::kernels::DeltaRuleAlgorithm::recurrent
                                               : tarn::kernels::DeltaRuleAlgorithm::automatic;
}
bool is_causal(Algo a) {
  return a == Algo::linear_causal_f32 || a == Algo::linear_causal_bf16 || a == Algo::linear_causal_bf16_scan ||
         a == Algo::softmax_causal ||
         a == Algo::softmax_causal_bf16 || is_delta(a);
}
#if defined(TARN_BENCH_BF16)
// linear_causal_bf16_scan times the scan kernels: the chunk-parallel path off for its calls.
void select_linear_path(Algo a, bool gpu) {
  TARN_BENCH_ON(gpu, linear_attention_bf16_set_chunk_parallel, a != Algo::linear_causal_bf16_scan);
}
#endif
bool available(Algo a) {
#if !defined(TARN_BENCH_DELTA_BF16)
  if (a == Algo::delta_causal_bf16) return false;
#endif
#if defined(TARN_BENCH_BF16)
  return true;
#else
  return !is_bf16(a);
#endif
}
// The kernel an algorithm times, without its precision: the `kernel` field of the JSON rows.
const char* kernel_name(Algo a) {
  if (is_delta(a)) return "delta_causal";
  if (is_softmax(a)) return is_causal(a) ? "softmax_causal" : "softmax_bidir";
  return is_causal(a) ? "linear_causal" : "linear_bidir";
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

// JSON text: a number (null when not finite), a string with its quotes and escapes.
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}
std::string json_string(const std::string& text) {
  std::string r = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      r += buf;
    } else {
      r += c;
    }
  }
  return r + "\"";
}

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
#if defined(TARN_BENCH_DELTA_BF16)
    if (a == Algo::delta_causal_bf16)
      return TARN_BENCH_ON(on_gpu, delta_rule_bf16_backward_workspace_floats,
                           cpu::DeltaRuleDims{sh.bh, sh.n, sh.d, sh.e}, cpu::DeltaRuleConfig{});
#endif
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
    select_linear_path(a, on_gpu);
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
#if defined(TARN_BENCH_DELTA_BF16)
  if (is_delta(algo))
    return TARN_BENCH_ON(gpu, delta_rule_bf16_forward, ddims, dcfg, q.get(), k.get(), v.get(), beta.get(), alpha.get(),
                         out.get(), nullptr, checkpoints.get(), ws.get(), ws.size());  // (ws: the backward's, larger)
#endif
#if defined(TARN_BENCH_BF16)
  select_linear_path(algo, gpu);
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
#if defined(TARN_BENCH_DELTA_BF16)
  if (is_delta(algo))  // aux holds d_beta
    return TARN_BENCH_ON(gpu, delta_rule_bf16_backward, ddims, dcfg, q.get(), k.get(), v.get(), beta.get(),
                         alpha.get(), checkpoints.get(), dout.get(), nullptr, dq.get(), dk.get(), dv.get(), aux.get(),
                         d_alpha.get(), ws.get(), ws.size());
#endif
#if defined(TARN_BENCH_BF16)
  select_linear_path(algo, gpu);
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
// When `errors` is given, the check's verdict goes there too as JSON
// ({"algo": ..., "ok": ..., "errors": {"out": ..., ...}, "tolerance": ...}).
bool check(Algo a, bool gpu, std::string* errors = nullptr) {
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
  // The delta rule's q and k rows were made unit length before the rounding (as Run fills them).
  const auto q = seen(is_delta(a) ? unit_rows(data[0], s.d) : data[0], s.bh * s.n * s.d);
  const auto k = seen(is_delta(a) ? unit_rows(data[1], s.d) : data[1], s.bh * s.n * s.d);
  const auto v = seen(data[2], s.bh * s.n * s.e), dout = seen(data[3], s.bh * s.n * s.e);
  std::vector<float> out(s.bh * s.n * s.e), aux(s.bh * s.n), dq(q.size()), dk(k.size()), dv(v.size());
  // Softmax and linear attention: their four CPU entry points take the same arguments (aux: lse or den).
  auto forward_backward = [&](const auto& dims, const auto& cfg, auto forward_workspace, auto forward,
                              auto backward_workspace, auto backward) {
    std::vector<float> ws(forward_workspace(dims, cfg));
    forward(dims, cfg, q.data(), k.data(), v.data(), out.data(), aux.data(), ws.data(), ws.size());
    ws.assign(backward_workspace(dims, cfg), 0.0f);
    backward(dims, cfg, q.data(), k.data(), v.data(), out.data(), aux.data(), dout.data(), dq.data(), dk.data(),
             dv.data(), ws.data(), ws.size());
  };
  if (is_delta(a)) {  // aux is d_beta
    const cpu::DeltaRuleDims dims{s.bh, s.n, s.d, s.e};
    const cpu::DeltaRuleConfig cfg;
    const auto& qd = q;
    const auto& kd = k;
    // The gates stay f32 in every precision: repeated, not rounded.
    auto repeated = [](const std::vector<float>& x, size_t n) {
      std::vector<float> r(n);
      for (size_t i = 0; i < n; ++i) r[i] = x[i % x.size()];
      return r;
    };
    const auto beta = repeated(delta_beta(), s.bh * s.n), alpha = repeated(delta_alpha(), s.bh * s.n);
    std::vector<float> chk(s.bh * cpu::delta_rule_checkpoints(dims, cfg) * s.d * s.e), d_alpha(s.bh * s.n);
    std::vector<float> ws(cpu::delta_rule_backward_workspace_floats(dims, cfg));
    cpu::delta_rule_forward(dims, cfg, qd.data(), kd.data(), v.data(), beta.data(), alpha.data(), out.data(), nullptr,
                            chk.data());
    cpu::delta_rule_backward(dims, cfg, qd.data(), kd.data(), v.data(), beta.data(), alpha.data(), chk.data(),
                             dout.data(), nullptr, dq.data(), dk.data(), dv.data(), aux.data(), d_alpha.data(),
                             ws.data(), ws.size());
  } else if (is_softmax(a)) {
    cpu::SoftmaxAttentionConfig cfg;
    cfg.causal = is_causal(a);
    forward_backward(cpu::SoftmaxAttentionDims{1, s.bh, s.n, s.n, s.d, s.e}, cfg,
                     cpu::softmax_attention_forward_workspace_floats, cpu::softmax_attention_forward,
                     cpu::softmax_attention_backward_workspace_floats, cpu::softmax_attention_backward);
  } else {
    cpu::LinearAttentionConfig cfg;
    cfg.causal = is_causal(a);
    cfg.feature_map = cpu::FeatureMap::elu1;
    forward_backward(cpu::LinearAttentionDims{1, s.bh, s.n, s.n, s.d, s.e}, cfg,
                     cpu::linear_attention_forward_workspace_floats, cpu::linear_attention_forward,
                     cpu::linear_attention_backward_workspace_floats, cpu::linear_attention_backward);
  }
  // The GPU's backward starts from its own out (and lse / den): the check covers the pair.
  const std::vector<float>* want[] = {&out, &aux, &dq, &dk, &dv};
  const char* names[] = {"out", is_delta(a) ? "d_beta" : is_softmax(a) ? "lse" : "den", "dq", "dk", "dv"};
  const double tol = is_bf16(a) ? 3e-2 : 1e-4;
  bool ok = true;
  std::ostringstream detail, json;
  json << "{\"algo\": \"" << algo_name(a) << "\", \"on\": \"" << (gpu ? "gpu" : "emulator") << "\", \"errors\": {";
  for (int i = 0; i < 5; ++i) {
    const double err = scaled_error(got[i], *want[i]);
    detail << " " << names[i] << " " << err;
    json << (i ? ", " : "") << "\"" << names[i] << "\": " << json_number(err);
    ok = ok && err <= tol;
  }
  json << "}, \"tolerance\": " << tol << ", \"ok\": " << (ok ? "true" : "false") << "}";
  if (errors) *errors = json.str();
  std::printf(
      "# check %-19s on the %s, B*H=%lld N=%lld d=%lld e=%lld vs CPU: max error / max |value|:%s (tolerance %.0e)%s\n",
      algo_name(a), gpu ? "GPU" : "emulator", (long long)s.bh, (long long)s.n, (long long)s.d, (long long)s.e,
      detail.str().c_str(), tol, ok ? "" : "  MISMATCH");
  return ok;
}

constexpr const char* kDescription = R"(Linear attention (causal and bidirectional, f32 and bf16, elu1 feature map fused)
and the causal gated delta rule (f32, chunked and recurrent; bf16, chunked on tensor cores) against the
FlashAttention-style softmax baseline (f32, and bf16 on tensor cores), forward and forward + backward, on the
roofline of the device it runs on (issue 7).

The delta rule's inputs are unit q, k rows, beta in (0.1, 0.9) and alpha in (0.9, 1); its
check compares d_beta where the others compare lse or den.

First every kernel is checked against the CPU kernel on one small shape (max |got - want| /
max |want| of every output and gradient): on the GPU when there is one, else on the CUDA
emulator, which is all this bench does without a GPU (timings need one). Then, on a GPU, each
algorithm is timed for N = 1K..64K (as far as memory allows), B*H = 4 and 128, d = e = 64 and
128 (--n, --bh and --d choose others), as CSV:
  fwd_ms, fwdbwd_ms   median over repeats of CUDA-event times of forward, and of forward then
                      backward, after --warmup untimed runs; before each timed run a buffer of
                      twice the L2 size is written, so that no input is served from L2 (with
                      --rotate, the runs go round enough copies of every tensor instead, at
                      least 3x the L2 in all, so that a run's tensors have left the L2 by its
                      next turn; the memset stays where memory allows one copy only)
  tflops              FLOP / time. Softmax: 4 Nq Nk d forward (2 Nq Nk (d + e) when e != d),
                      halved when causal; backward 2.5x forward (S recomputed, dP, dV, dK, dQ).
                      Linear: kernels/linear_attention.h's count for the chunked algorithm with
                      C = 64 rows per chunk, as tools/bench/attention_bench.cpp (per chunk of r
                      rows: forward 4 r d (e+1) + 2 r(r+1)/2 (d + e + 1), backward 10 r d (e+1)
                      + 6 r(r+1)/2 (d + e + 1); bidirectional 2 (Nq + Nk) d (e+1) forward).
                      Delta rule: the token-by-token recurrence's count for all of its
                      algorithms (delta_causal_f32: the kernels' choice, the chunked WY form
                      where it fits; delta_causal_f32_recurrent: the recurrence forced;
                      delta_causal_bf16: the chunked form on tensor cores), per
                      token 6 d e forward (S^T k, the rank-1 write, the readout) and 21 d e
                      backward (the chunk's states recomputed, dq, dS, dw, dk, d_alpha and dS's
                      update): the same work done, so the two compare by time.
  gbps                compulsory bytes / time: the tensors the API reads and writes, once each
                      (forward q, k, v -> out, lse or den; backward q, k, v, out, lse or den,
                      dout -> dq, dk, dv), at 4 bytes (f32) or 2 (bf16; den, d_beta stay f32); the
                      delta rule's gates and checkpoints are left out.
  of_roofline         max(bytes / HBM bandwidth, FLOP / peak) / time: 1 is the roofline. Peaks
                      from the device (tools/bench/common/gpu_peaks.h): f32 FMA, bf16 dense
                      tensor cores, HBM. of_h100 uses the issue's H100 figures instead: 3.35 TB/s,
                      67 TFLOP/s f32 FMA, 989 TFLOP/s bf16 dense.
The issue's target: B*H = 128, N = 4096, d = 64 at >= 50% of the roofline; printed at the end.

--json FILE writes the checks and every row (the medians, their minimum and maximum, the repeats,
the copies rotated, the delta rule's algorithm, or why a shape was not timed: "unsupported: ..."
when it does not fit the memory or the kernels, "skipped: ..." past --max-ms or --deadline-s) to
FILE, rewritten after each row so that a run cut short leaves the rows it timed.)";

struct Options {
  bool quick = false;
  bool skip_check = false;
  bool keep_going = false;
  bool rotate = false;
  int64_t min_n = 1024;
  int64_t max_n = 65536;
  std::vector<int64_t> ns, bhs, ds;  // empty: the default sweep
  int repeats = 7;
  int min_repeats = 1;
  int warmup = 1;
  double max_ms = 4000;
  double deadline_s = 0;  // 0: none
  std::string json;
  std::vector<std::string> algo_names;
  std::vector<Algo> algos;  // from algo_names
};

void add_flags(CLI::App& app, Options& o) {
  for (Algo a : kAllAlgos) o.algo_names.push_back(algo_name(a));
  app.add_flag("--quick", o.quick, "B*H = 128, d = 64, N = 1K and 4K only (includes the target shape)");
  tarn::cli::add_integer(app, "--min-n", o.min_n, 1, 1 << 30, "shortest sequence length timed");
  tarn::cli::add_integer(app, "--max-n", o.max_n, 1, 1 << 30, "longest sequence length timed");
  tarn::cli::add_list(app, "--n", o.ns,
                      "the sequence lengths timed, within --min-n and --max-n (default: 1K, 2K, ..., 64K)",
                      tarn::cli::integer(1, 1 << 30));
  tarn::cli::add_list(app, "--bh", o.bhs, "the batch x heads values timed (default: 4 and 128; --quick: 128)",
                      tarn::cli::integer(1, 1 << 20));
  tarn::cli::add_list(app, "--d", o.ds, "the head sizes timed, d = e (default: 64 and 128; --quick: 64)",
                      tarn::cli::integer(1, 4096));
  tarn::cli::add_integer(app, "--repeats", o.repeats, 1, 1000, "timed runs per figure", "R");
  tarn::cli::add_integer(app, "--min-repeats", o.min_repeats, 1, 1000,
                         "timed runs per figure at least, also where a run takes over 300 ms (which otherwise cuts "
                         "--repeats to 3, or to 1 over 2 s); at most --repeats",
                         "R");
  tarn::cli::add_integer(app, "--warmup", o.warmup, 1, 100, "untimed runs before the timed ones", "W");
  app.add_flag("--rotate", o.rotate,
               "keep the L2 cold by going round copies of the tensors (at least 3x the L2 in all, at most 32 copies, "
               "within 80% of the free memory) rather than by writing a buffer before each timed run");
  app.add_option("--json", o.json, "also write the checks and the rows as JSON to FILE (rewritten after each row)")
      ->type_name("FILE");
  tarn::cli::add_real(app, "--deadline-s", o.deadline_s, 0, 1e6,
                      "start no row S seconds after the timings began (0: no limit); the rows left are written as "
                      "skipped",
                      "S");
  app.add_flag("--keep-going", o.keep_going,
               "time every algorithm even when its check against the CPU fails (its rows are marked \"check\": "
               "\"MISMATCH\")");
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

// The --json file: the device, the timing method, the checks and the rows, rewritten whole (to a
// temporary file, then renamed) after each row, so that a run cut short leaves valid JSON.
struct JsonOut {
  std::string path;
  std::string device = "null", timing = "null", note;
  std::vector<std::string> checks, rows;
  bool complete = false;

  void write() const {
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp);
      f << "{\n  \"tool\": \"cuda_attention_bench\",\n  \"device\": " << device << ",\n  \"timing\": " << timing
        << ",\n  \"note\": " << json_string(note) << ",\n  \"complete\": " << (complete ? "true" : "false")
        << ",\n  \"checks\": [";
      for (size_t i = 0; i < checks.size(); ++i) f << (i ? ",\n    " : "\n    ") << checks[i];
      f << (checks.empty() ? "]" : "\n  ]") << ",\n  \"rows\": [";
      for (size_t i = 0; i < rows.size(); ++i) f << (i ? ",\n    " : "\n    ") << rows[i];
      f << (rows.empty() ? "]" : "\n  ]") << "\n}\n";
      TARN_CHECK(f.good(), "cuda_attention_bench: cannot write ", tmp);
    }
    TARN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cuda_attention_bench: cannot rename ", tmp, " to ",
               path);
  }
};

}  // namespace

#if defined(TARN_WITH_CUDA)
namespace {

struct Peaks {
  double f32 = 0, bf16 = 0, hbm = 0;
};

struct Sample {
  double median = 0, min = 0, max = 0;  // ms
  int repeats = 0;
};

// Median (and range) of the CUDA-event times of runs of fns, run r on fns[r % fns.size()] (the
// copies --rotate goes round), after o.warmup untimed runs; the first of those decides the
// repeats (fewer for runs that take seconds, never fewer than --min-repeats). With one copy,
// `flush` (larger than L2) is written before each timed run so that the inputs come from HBM.
Sample time_ms(const std::vector<std::function<void()>>& fns, const Options& o, void* flush, size_t flush_bytes) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  size_t call = 0;
  auto next = [&] { fns[call++ % fns.size()](); };
  cudaEventRecord(start);
  next();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float first = 0;
  cudaEventElapsedTime(&first, start, stop);
  for (int w = 1; w < o.warmup; ++w) next();
  int repeats = o.repeats;
  if (first > 2000)
    repeats = 1;
  else if (first > 300)
    repeats = std::min(repeats, 3);
  repeats = std::max(repeats, std::min(o.min_repeats, o.repeats));
  std::vector<float> ms(repeats);
  for (int r = 0; r < repeats; ++r) {
    if (fns.size() == 1) cudaMemsetAsync(flush, r & 0xff, flush_bytes);
    cudaEventRecord(start);
    next();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[r], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const cudaError_t err = cudaGetLastError();
  TARN_CHECK(err == cudaSuccess, "cuda_attention_bench: ", cudaGetErrorString(err));
  std::sort(ms.begin(), ms.end());
  Sample s;
  s.median = ms[repeats / 2];
  s.min = ms.front();
  s.max = ms.back();
  s.repeats = repeats;
  return s;
}

// Device bytes one run allocates: its tensors, aux (lse, den or d_beta), the backward's workspace
// and the delta rule's gates, d_alpha and checkpoints; to skip shapes that do not fit and to size
// the rotation.
double run_bytes(Algo a, const Shape& s) {
  const double t = is_bf16(a) ? 2.0 : 4.0;
  const double tensors = t * s.bh * s.n * (4.0 * s.d + 4.0 * s.e);  // q k dq dk, v out dout dv
  double floats = double(s.bh) * s.n + double(Run<float>::workspace_floats(a, true, s));
  if (is_delta(a)) floats += 3.0 * s.bh * s.n + double(Run<float>::delta_checkpoint_floats(s));
  return tensors + 4.0 * floats;
}

// How the kernels run this shape, for the rows: the delta rule's algorithm and sub-chunk.
std::string variant(Algo a, const Shape& s) {
  const cpu::DeltaRuleDims dims{s.bh, s.n, s.d, s.e};
  const cpu::DeltaRuleConfig cfg;
  if (a == Algo::delta_causal_f32_recurrent) return "recurrent (forced)";
  if (a == Algo::delta_causal_f32) {
    const int64_t c = rt::delta_rule_sub_chunk(dims, cfg);
    return c > 0 ? "chunked (WY), sub-chunks of " + std::to_string(c) + " tokens"
                 : "recurrent (the chunked kernels' shared memory does not fit)";
  }
#if defined(TARN_BENCH_DELTA_BF16)
  if (a == Algo::delta_causal_bf16)
    return "chunked (WY) on tensor cores, sub-chunks of " + std::to_string(rt::delta_rule_bf16_sub_chunk(dims, cfg)) +
           " tokens";
#endif
  return "";
}

// Why a shape cannot run at all, before any allocation ("" when it can).
std::string unsupported(Algo a, const Shape& s) {
#if defined(TARN_BENCH_DELTA_BF16)
  if (a == Algo::delta_causal_bf16 &&
      rt::delta_rule_bf16_sub_chunk(cpu::DeltaRuleDims{s.bh, s.n, s.d, s.e}, cpu::DeltaRuleConfig{}) == 0)
    return "unsupported: dk = dv = " + std::to_string(s.d) +
           " does not fit the bf16 chunked kernels' shared memory on this device";
#endif
  return "";
}

int time_all(const Options& o, JsonOut& json, const std::vector<Algo>& mismatched) {
  const auto began = std::chrono::steady_clock::now();
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
  {
    std::ostringstream d;
    d << "{\"name\": " << json_string(dev.name) << ", \"sm\": " << dev.major * 10 + dev.minor
      << ", \"sms\": " << dev.sms << ", \"clock_hz\": " << json_number(dev.clock_hz)
      << ", \"l2_bytes\": " << dev.l2_bytes << ", \"memory_bytes\": " << dev.memory_bytes
      << ", \"peaks_from_attributes\": {\"f32_flops\": " << json_number(pk.f32)
      << ", \"bf16_flops\": " << json_number(pk.bf16) << ", \"hbm_bytes_per_s\": " << json_number(pk.hbm) << "}}";
    json.device = d.str();
    std::ostringstream t;
    t << "{\"clock\": \"CUDA events around each run\", \"statistic\": \"median\", \"repeats\": " << o.repeats
      << ", \"min_repeats\": " << std::min(o.min_repeats, o.repeats) << ", \"warmup\": " << o.warmup
      << ", \"l2\": " << json_string(o.rotate ? "rotate: copies of every tensor, >= 3x L2 in all (memset of 2x L2 "
                                                "before each run where one copy only fits)"
                                              : "memset of 2x L2 before each timed run")
      << ", \"data\": \"uniform random in [-1, 1] (q, k unit rows for the delta rule; beta in (0.1, 0.9), alpha in "
         "(0.9, 1)), a 2^20-value pattern repeated\"}";
    json.timing = t.str();
    json.write();
  }

  const size_t flush_bytes = std::max<size_t>(size_t(2) * dev.l2_bytes, size_t(64) << 20);
  void* flush = rt::device_malloc(flush_bytes, 0);

  std::vector<int64_t> ns;
  if (!o.ns.empty()) {
    for (int64_t n : o.ns)
      if (n >= o.min_n && n <= o.max_n) ns.push_back(n);
  } else {
    for (int64_t n = 1024; n <= std::min<int64_t>(o.max_n, 65536); n *= 2)
      if ((!o.quick || n == 1024 || n == 4096) && n >= o.min_n) ns.push_back(n);
  }
  const std::vector<int64_t> bhs =
      !o.bhs.empty() ? o.bhs : o.quick ? std::vector<int64_t>{128} : std::vector<int64_t>{4, 128};
  const std::vector<int64_t> ds =
      !o.ds.empty() ? o.ds : o.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 128};

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
  auto row_head = [](Algo a, const Shape& s) {
    std::ostringstream r;
    r << "{\"algo\": " << json_string(algo_name(a)) << ", \"kernel\": " << json_string(kernel_name(a))
      << ", \"precision\": \"" << (is_bf16(a) ? "bf16" : "f32") << "\", \"bh\": " << s.bh << ", \"n\": " << s.n
      << ", \"d\": " << s.d << ", \"e\": " << s.e;
    return r.str();
  };
  // A row not timed: `line` for the log, `status` ("unsupported: ..." or "skipped: ...") for the JSON.
  auto not_timed = [&](Algo a, const Shape& s, const std::string& line, const std::string& status) {
    std::printf("# %s B*H=%lld N=%lld d=%lld: %s\n", algo_name(a), (long long)s.bh, (long long)s.n, (long long)s.d,
                line.c_str());
    std::fflush(stdout);
    json.rows.push_back(row_head(a, s) + ", \"status\": " + json_string(status) + "}");
    json.write();
  };
  for (int64_t d : ds)
    for (int64_t bh : bhs) {
      std::vector<Algo> too_slow;  // forward + backward took over --max-ms at a shorter N
      for (int64_t n : ns)
        for (Algo a : o.algos) {
          if (!available(a)) continue;
          const Shape s{bh, n, d, d};
          const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
          if (o.deadline_s > 0 && elapsed_s > o.deadline_s) {
            char why[96];
            std::snprintf(why, sizeof why, "skipped: time budget (--deadline-s %.0f) spent", o.deadline_s);
            not_timed(a, s, why, why);
            continue;
          }
          if (std::find(too_slow.begin(), too_slow.end(), a) != too_slow.end()) {
            char line[96], why[96];
            std::snprintf(line, sizeof line, "skipped (a shorter N took over --max-ms %.0f ms)", o.max_ms);
            std::snprintf(why, sizeof why, "skipped: a shorter N took over --max-ms %.0f ms", o.max_ms);
            not_timed(a, s, line, why);
            continue;
          }
          const std::string cannot = unsupported(a, s);
          if (!cannot.empty()) {
            not_timed(a, s, cannot, cannot);
            continue;
          }
          size_t free_b = 0, total_b = 0;
          cudaMemGetInfo(&free_b, &total_b);
          double set_bytes = 0;
          try {
            set_bytes = run_bytes(a, s);
          } catch (const std::exception& e) {  // a workspace query that refuses the shape
            not_timed(a, s, std::string("unsupported: ") + e.what(), std::string("unsupported: ") + e.what());
            continue;
          }
          if (set_bytes > 0.9 * double(free_b)) {
            char line[128], why[128];
            std::snprintf(line, sizeof line, "needs %.1f GiB, %.1f GiB free: skipped", set_bytes / double(1 << 30),
                          free_b / double(1 << 30));
            std::snprintf(why, sizeof why, "unsupported: needs %.1f GiB of device memory, %.1f GiB free",
                          set_bytes / double(1 << 30), free_b / double(1 << 30));
            not_timed(a, s, line, why);
            continue;
          }
          // The copies the runs go round (--rotate): at least 3x the L2 in all, at most 32, in 80% of the free memory.
          size_t sets = 1;
          if (o.rotate) {
            sets = static_cast<size_t>(std::ceil(3.0 * double(dev.l2_bytes) / set_bytes));
            sets = std::min<size_t>(std::max<size_t>(sets, 1), 32);
            while (sets > 1 && double(sets) * set_bytes > 0.8 * double(free_b)) --sets;
          }
          Sample fwd, fb;
          try {
            std::vector<std::unique_ptr<RunBase>> runs;
            std::vector<std::function<void()>> fwd_fns, fb_fns;
            for (size_t i = 0; i < sets; ++i) {
              runs.push_back(make_run(a, true, s, data));
              RunBase* r = runs.back().get();
              fwd_fns.push_back([r] { r->forward(); });
              fb_fns.push_back([r] {
                r->forward();
                r->backward();
              });
            }
            fwd = time_ms(fwd_fns, o, flush, flush_bytes);
            fb = time_ms(fb_fns, o, flush, flush_bytes);
          } catch (const std::exception& e) {
            const std::string why = std::string("unsupported: ") + e.what();
            not_timed(a, s, why, why);
            // An error that sticks to the context ends the timings: nothing after it could run.
            if (cudaDeviceSynchronize() != cudaSuccess) throw;
            continue;
          }
          const double fwd_ms = fwd.median, fb_ms = fb.median;
          const double ff = flops_of(a, s, false), fbf = ff + flops_of(a, s, true);
          const double bf = bytes_of(a, s, false), bb = bf + bytes_of(a, s, true);
          const double peak = is_bf16(a) ? pk.bf16 : pk.f32, h100 = is_bf16(a) ? kH100Bf16 : kH100F32;
          auto bound_s = [](double flops, double bytes, double p, double bw) {
            return std::max(flops / p, bytes / bw);
          };
          auto bound_name = [&](double flops, double bytes) {
            return flops / peak > bytes / pk.hbm ? "compute" : "memory";
          };
          const double fwd_frac = bound_s(ff, bf, peak, pk.hbm) / (fwd_ms * 1e-3);
          const double fb_frac = bound_s(fbf, bb, peak, pk.hbm) / (fb_ms * 1e-3);
          std::printf("%s,%lld,%lld,%lld,%lld,%.3f,%.3f,%.2f,%.2f,%.1f,%.1f,%s,%s,%.3f,%.3f,%.3f,%.3f\n", algo_name(a),
                      (long long)bh, (long long)n, (long long)d, (long long)d, fwd_ms, fb_ms,
                      ff / (fwd_ms * 1e-3) / 1e12, fbf / (fb_ms * 1e-3) / 1e12, bf / (fwd_ms * 1e-3) / 1e9,
                      bb / (fb_ms * 1e-3) / 1e9, bound_name(ff, bf), bound_name(fbf, bb), fwd_frac, fb_frac,
                      bound_s(ff, bf, h100, kH100Hbm) / (fwd_ms * 1e-3),
                      bound_s(fbf, bb, h100, kH100Hbm) / (fb_ms * 1e-3));
          std::fflush(stdout);
          {
            const bool bad = std::find(mismatched.begin(), mismatched.end(), a) != mismatched.end();
            std::ostringstream r;
            r << row_head(a, s) << ", \"status\": \"ok\", \"variant\": " << json_string(variant(a, s))
              << ", \"check\": \"" << (bad ? "MISMATCH" : o.skip_check ? "not run" : "ok") << "\""
              << ", \"fwd_ms\": " << json_number(fwd.median) << ", \"fwd_ms_min\": " << json_number(fwd.min)
              << ", \"fwd_ms_max\": " << json_number(fwd.max) << ", \"fwd_repeats\": " << fwd.repeats
              << ", \"fwdbwd_ms\": " << json_number(fb.median) << ", \"fwdbwd_ms_min\": " << json_number(fb.min)
              << ", \"fwdbwd_ms_max\": " << json_number(fb.max) << ", \"fwdbwd_repeats\": " << fb.repeats
              << ", \"sets\": " << sets << ", \"set_bytes\": " << json_number(set_bytes)
              << ", \"l2\": \"" << (sets > 1 ? "rotated" : "flushed") << "\"}";
            json.rows.push_back(r.str());
            json.write();
          }
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
  json.complete = true;
  json.write();
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
  Options o;
  if (const std::optional<int> status = tarn::bench::start_bench(argc, argv, kDescription, "cuda_attention_bench",
                                                                 [&](CLI::App& app) { add_flags(app, o); }))
    return *status;
  for (const std::string& name : o.algo_names)
    for (Algo a : kAllAlgos)
      if (name == algo_name(a)) o.algos.push_back(a);
  try {
    bool gpu = false;
#if defined(TARN_WITH_CUDA)
    gpu = rt::device_count() > 0;
#endif
    JsonOut json;
    json.path = o.json;
    bool ok = true;
    std::vector<Algo> mismatched;
    for (Algo a : o.algos) {
      if (!available(a)) {
        std::printf("# %s: not built (no %s)\n", algo_name(a),
                    a == Algo::delta_causal_bf16 ? "kernels/cuda_delta_rule_bf16.h"
                                                 : "kernels/cuda_linear_attention_bf16.h");
        continue;
      }
      if (o.skip_check) continue;
      std::string verdict;
      if (!check(a, gpu, &verdict)) {
        ok = false;
        mismatched.push_back(a);
      }
      json.checks.push_back(verdict);
    }
    json.write();
    if (!ok && !o.keep_going) {
      std::printf("# the CUDA kernels disagree with the CPU: not timing them\n");
      json.note = "a check failed: nothing timed";
      json.write();
      return 1;
    }
    if (!ok) std::printf("# a check failed: timing anyway (--keep-going); the rows of those algorithms say MISMATCH\n");
    if (!gpu) {
      std::printf("# no CUDA device%s: the kernels were checked on the emulator; timings need a GPU\n",
                  rt::backend_built() ? "" : " (tarn built without CUDA)");
      json.note = "no CUDA device: the checks ran on the emulator, nothing timed";
      json.complete = true;
      json.write();
      return 0;
    }
#if defined(TARN_WITH_CUDA)
    const int status = time_all(o, json, mismatched);
    return ok ? status : 1;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
