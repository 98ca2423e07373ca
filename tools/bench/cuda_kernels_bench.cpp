// Every CUDA kernel of kernels/cuda_kernels.h (and the random fills of kernels/random.h)
// against the CPU kernel of the same name, and, on a GPU, timed. `cuda_kernels_bench --help`
// says how and what the figures are (kDescription).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/blas_info.h"
#include "kernels/check.h"
#include "tools/bench/common/bench_util.h"
#include "tools/bench/common/gpu_peaks.h"
#include "tools/cli.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_runtime.h"
#include "kernels/cuda_stream.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layer_norm.h"
#include "kernels/layout.h"
#include "kernels/optim.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

#if defined(TARN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace {

namespace kc = tarn::kernels;
using kc::cpu::Binary;
using kc::cpu::Gelu;
using kc::cpu::Unary;

// Where a kernel runs: the CPU reference, the emulator, or the GPU.
enum class Api { cpu, emu, gpu };

const char* api_name(Api api) { return api == Api::cpu ? "cpu" : api == Api::emu ? "emulator" : "gpu"; }

#if defined(TARN_WITH_CUDA)
#define ON(api, fn, ...)                                \
  ((api) == Api::cpu   ? kc::cpu::fn(__VA_ARGS__)       \
   : (api) == Api::emu ? kc::cuda_emu::fn(__VA_ARGS__) \
                       : kc::cuda::fn(__VA_ARGS__))
#else
#define ON(api, fn, ...) ((api) == Api::cpu ? kc::cpu::fn(__VA_ARGS__) : kc::cuda_emu::fn(__VA_ARGS__))
#endif

// Deterministic data, quickly (training-sized shapes hold ~10^8 values): a 64-bit LCG.
std::vector<float> data(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}
std::vector<int32_t> ids(size_t n, int32_t vocab, uint64_t seed) {
  std::vector<int32_t> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 7;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return v;
}

// The buffers of one case on one Api: host vectors for the CPU and the emulator, device
// memory for the GPU. Kernels that return a value leave it in `scalars`.
class Arrays {
 public:
  explicit Arrays(Api api) : api_(api) {}
  ~Arrays() {
#if defined(TARN_WITH_CUDA)
    for (auto& a : arrays_)
      if (a.device) kc::cuda::device_free(a.device, 0);
#endif
  }
  Arrays(const Arrays&) = delete;
  Arrays& operator=(const Arrays&) = delete;

  int add(std::vector<float> host) { return add_raw(std::move(host), {}); }
  int add(std::vector<int32_t> host) { return add_raw({}, std::move(host)); }

  float* f(int i) { return static_cast<float*>(ptr(i)); }
  int32_t* i32(int i) { return static_cast<int32_t*>(ptr(i)); }
  size_t bytes(int i) const { return arrays_[i].bytes; }

  std::vector<float> read(int i) const {
    const Array& a = arrays_[i];
    if (!a.device) return a.f;
    std::vector<float> h(a.bytes / sizeof(float));
#if defined(TARN_WITH_CUDA)
    if (a.bytes) kc::cuda::copy_device_to_host(h.data(), a.device, a.bytes, 0);
#endif
    return h;
  }

  std::vector<double> scalars;

 private:
  struct Array {
    std::vector<float> f;
    std::vector<int32_t> ids;
    size_t bytes = 0;
    void* device = nullptr;
  };

  int add_raw(std::vector<float> f, std::vector<int32_t> i) {
    Array a;
    a.bytes = f.size() * sizeof(float) + i.size() * sizeof(int32_t);
    a.f = std::move(f);
    a.ids = std::move(i);
#if defined(TARN_WITH_CUDA)
    if (api_ == Api::gpu) {
      a.device = kc::cuda::device_malloc(std::max<size_t>(a.bytes, 4), 0);
      const void* src = a.f.empty() ? static_cast<const void*>(a.ids.data()) : a.f.data();
      if (a.bytes) kc::cuda::copy_host_to_device(a.device, src, a.bytes, 0);
      a.f.clear();
      a.f.shrink_to_fit();
      a.ids.clear();
      a.ids.shrink_to_fit();
    }
#endif
    arrays_.push_back(std::move(a));
    return static_cast<int>(arrays_.size() - 1);
  }
  void* ptr(int i) {
    Array& a = arrays_[i];
    if (a.device) return a.device;
    return a.f.empty() ? static_cast<void*>(a.ids.data()) : a.f.data();
  }

  Api api_;
  std::deque<Array> arrays_;  // a deque: adding never moves the host buffers already handed out
};

// One kernel call: its buffers, the call, what it reads and writes, how much work it does.
struct Case {
  std::string kernel, shape;
  double flops = 0;  // per call; 0 for data movement and integer work (random bits)
  double tol = 1e-5;  // max |cuda - cpu| / max |cpu| allowed, per output
  std::function<void(Arrays&)> init;
  std::function<void(Api, Arrays&)> run;
  std::vector<int> reads, writes;  // array indices (as init adds them); writes are the outputs
  bool bitwise = false;            // the CUDA kernel promises the CPU's bits
};

// The shapes: `rows` x `cols` for the row-wise kernels, `rows * cols` for the elementwise ones.
struct Size {
  int64_t rows, cols;           // activations (rows, cols); cols divisible by 4
  int64_t vocab, dim, tokens;   // embedding tables and cross-entropy (tokens, vocab)
  int64_t batch, m, n, k;       // GEMM
  int64_t heads, seq, head_dim; // permute (B, H, N, d) -> (B, N, H, d)
};

constexpr Size kSmall{37, 1000, 997, 65, 301, 2, 37, 45, 51, 3, 37, 17};
constexpr Size kLarge{8192, 4096, 32000, 1024, 8192, 1, 4096, 4096, 4096, 16, 1024, 64};
constexpr Size kQuick{2048, 1024, 8000, 512, 2048, 1, 1024, 1024, 1024, 8, 512, 64};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

std::vector<Case> make_cases(const Size& z) {
  std::vector<Case> cases;
  const int64_t R = z.rows, C = z.cols, n = R * C;
  const std::string rc = dims({R, C});
  auto elementwise = [&](std::string name, double flops_per, std::function<void(Api, Arrays&)> run, int inputs) {
    Case c;
    c.kernel = std::move(name);
    c.shape = rc;
    c.flops = flops_per * static_cast<double>(n);
    c.init = [n, inputs](Arrays& a) {
      for (int i = 0; i < inputs; ++i) a.add(data(n, 0.05f, 2.0f, 10 + i));
      a.add(std::vector<float>(n, 0.0f));
    };
    c.run = std::move(run);
    for (int i = 0; i < inputs; ++i) c.reads.push_back(i);
    c.writes = {inputs};
    cases.push_back(std::move(c));
  };

  // elementwise.cu
  elementwise("binary(add)", 1, [n](Api api, Arrays& a) { ON(api, binary, Binary::add, a.f(0), a.f(1), a.f(2), n); }, 2);
  elementwise("unary(exp)", 1, [n](Api api, Arrays& a) { ON(api, unary, Unary::exp, a.f(0), a.f(1), n, 0.0f); }, 1);
  elementwise("unary_backward(tanh)", 3,
              [n](Api api, Arrays& a) { ON(api, unary_backward, Unary::tanh, a.f(0), a.f(1), a.f(2), a.f(3), n, 0.0f); },
              3);
  {
    Case c;
    c.kernel = "binary_row(mul)";
    c.shape = rc + " by " + dims({C});
    c.flops = static_cast<double>(n);
    c.init = [=](Arrays& a) {
      a.add(data(n, -1.0f, 1.0f, 20));
      a.add(data(C, -1.0f, 1.0f, 21));
      a.add(std::vector<float>(n, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) { ON(api, binary_row, Binary::mul, a.f(0), a.f(1), a.f(2), R, C); };
    c.reads = {0, 1};
    c.writes = {2};
    cases.push_back(std::move(c));
  }
  {
    // (R, 4, C/4) + (R, 1, C/4): the middle axis broadcast.
    Case c;
    const int64_t q = C / 4;
    c.kernel = "binary_broadcast(add)";
    c.shape = dims({R, 4, q}) + " by " + dims({R, 1, q});
    c.flops = static_cast<double>(n);
    c.init = [=](Arrays& a) {
      a.add(data(n, -1.0f, 1.0f, 30));
      a.add(data(R * q, -1.0f, 1.0f, 31));
      a.add(std::vector<float>(n, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) {
      const int64_t shape[3] = {R, 4, q}, sa[3] = {4 * q, q, 1}, sb[3] = {q, 0, 1};
      ON(api, binary_broadcast, Binary::add, a.f(0), sa, a.f(1), sb, a.f(2), shape, 3);
    };
    c.reads = {0, 1};
    c.writes = {2};
    cases.push_back(std::move(c));
  }

  // reduce.cu
  auto reduction = [&](std::string name, std::string shape, int64_t outer, int64_t len, int64_t inner) {
    Case c;
    c.kernel = std::move(name);
    c.shape = std::move(shape);
    c.flops = static_cast<double>(n);
    c.tol = 1e-5;
    c.init = [=](Arrays& a) {
      a.add(data(n, -1.0f, 1.0f, 40));
      a.add(std::vector<float>(outer * inner, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) { ON(api, sum_axis, a.f(0), a.f(1), outer, len, inner, 0.5f); };
    c.reads = {0};
    c.writes = {1};
    cases.push_back(std::move(c));
  };
  reduction("sum_axis(last)", rc + " -> " + dims({R}), R, C, 1);
  reduction("sum_axis(first)", rc + " -> " + dims({C}), 1, R, C);
  {
    Case c;
    c.kernel = "sum_all";
    c.shape = dims({n});
    c.flops = static_cast<double>(n);
    c.tol = 1e-6;
    c.init = [=](Arrays& a) { a.add(data(n, -1.0f, 1.0f, 41)); };
    c.run = [=](Api api, Arrays& a) { a.scalars = {ON(api, sum_all, a.f(0), n)}; };
    c.reads = {0};
    cases.push_back(std::move(c));
  }
  {
    Case c;
    c.kernel = "broadcast_axis";
    c.shape = dims({R}) + " -> " + rc;
    c.init = [=](Arrays& a) {
      a.add(data(R, -1.0f, 1.0f, 42));
      a.add(std::vector<float>(n, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) { ON(api, broadcast_axis, a.f(0), a.f(1), R, C, 1, 2.0f); };
    c.reads = {0};
    c.writes = {1};
    cases.push_back(std::move(c));
  }

  // softmax.cu: forward (x -> y), backward (y, dy -> dx), y from the CPU forward.
  for (bool log : {false, true}) {
    Case f;
    f.kernel = log ? "log_softmax_forward" : "softmax_forward";
    f.shape = rc;
    f.flops = 4.0 * static_cast<double>(n);
    f.init = [=](Arrays& a) {
      a.add(data(n, -4.0f, 4.0f, 50));
      a.add(std::vector<float>(n, 0.0f));
    };
    f.run = [=](Api api, Arrays& a) {
      if (log)
        ON(api, log_softmax_forward, a.f(0), a.f(1), R, C);
      else
        ON(api, softmax_forward, a.f(0), a.f(1), R, C);
    };
    f.reads = {0};
    f.writes = {1};
    cases.push_back(f);
    Case b = f;
    b.kernel = log ? "log_softmax_backward" : "softmax_backward";
    b.flops = 3.0 * static_cast<double>(n);
    b.init = [=](Arrays& a) {
      std::vector<float> y(n);
      const auto x = data(n, -4.0f, 4.0f, 50);
      if (log)
        kc::cpu::log_softmax_forward(x.data(), y.data(), R, C);
      else
        kc::cpu::softmax_forward(x.data(), y.data(), R, C);
      a.add(std::move(y));
      a.add(data(n, -1.0f, 1.0f, 51));
      a.add(std::vector<float>(n, 0.0f));
    };
    b.run = [=](Api api, Arrays& a) {
      if (log)
        ON(api, log_softmax_backward, a.f(0), a.f(1), a.f(2), R, C);
      else
        ON(api, softmax_backward, a.f(0), a.f(1), a.f(2), R, C);
    };
    b.reads = {0, 1};
    b.writes = {2};
    cases.push_back(b);
  }

  // cross_entropy.cu: (tokens, vocab) logits, every 7th target ignored, smoothing 0.1.
  {
    const int64_t T = z.tokens, V = z.vocab;
    constexpr int32_t kIgnore = -100;
    auto targets = [=] {
      auto t = ids(T, static_cast<int32_t>(V), 60);
      for (int64_t i = 0; i < T; i += 7) t[i] = kIgnore;
      return t;
    };
    Case f;
    f.kernel = "cross_entropy_forward";
    f.shape = dims({T, V});
    f.flops = 4.0 * static_cast<double>(T * V);
    f.tol = 2e-5;
    f.init = [=](Arrays& a) {
      a.add(data(T * V, -6.0f, 6.0f, 61));
      a.add(targets());
      a.add(std::vector<float>(T, 0.0f));
    };
    f.run = [=](Api api, Arrays& a) {
      const kc::cpu::CrossEntropySum s = ON(api, cross_entropy_forward, a.f(0), a.i32(1), T, V, kIgnore, 0.1f, a.f(2));
      a.scalars = {s.loss, static_cast<double>(s.count)};
    };
    f.reads = {0, 1};
    f.writes = {2};
    cases.push_back(f);
    Case b = f;
    b.kernel = "cross_entropy_backward";
    b.flops = 4.0 * static_cast<double>(T * V);
    b.init = [=](Arrays& a) {
      const auto logits = data(T * V, -6.0f, 6.0f, 61);
      const auto t = targets();
      std::vector<float> lse(T);
      kc::cpu::cross_entropy_forward(logits.data(), t.data(), T, V, kIgnore, 0.1f, lse.data());
      a.add(logits);
      a.add(t);
      a.add(std::move(lse));
      a.add(std::vector<float>(T * V, 0.0f));
    };
    b.run = [=](Api api, Arrays& a) {
      ON(api, cross_entropy_backward, a.f(0), a.i32(1), a.f(2), T, V, kIgnore, 0.1f, 1.0f / T, a.f(3));
    };
    b.reads = {0, 1, 2};
    b.writes = {3};
    cases.push_back(b);
  }

  // layer_norm.cu
  {
    Case f;
    f.kernel = "layer_norm_forward";
    f.shape = rc;
    f.flops = 7.0 * static_cast<double>(n);
    f.init = [=](Arrays& a) {
      a.add(data(n, -2.0f, 3.0f, 70));
      a.add(data(C, 0.5f, 1.5f, 71));
      a.add(data(C, -0.5f, 0.5f, 72));
      a.add(std::vector<float>(n, 0.0f));
      a.add(std::vector<float>(R, 0.0f));
      a.add(std::vector<float>(R, 0.0f));
    };
    f.run = [=](Api api, Arrays& a) {
      ON(api, layer_norm_forward, a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.f(5), R, C, 1e-5f);
    };
    f.reads = {0, 1, 2};
    f.writes = {3, 4, 5};
    cases.push_back(f);
    Case b;
    b.kernel = "layer_norm_backward";
    b.shape = rc;
    b.flops = 10.0 * static_cast<double>(n);
    b.tol = 2e-5;
    b.init = [=](Arrays& a) {
      const auto x = data(n, -2.0f, 3.0f, 70), gamma = data(C, 0.5f, 1.5f, 71), beta = data(C, -0.5f, 0.5f, 72);
      std::vector<float> y(n), mean(R), rstd(R);
      kc::cpu::layer_norm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), R, C, 1e-5f);
      a.add(x);
      a.add(data(n, -1.0f, 1.0f, 73));
      a.add(gamma);
      a.add(std::move(mean));
      a.add(std::move(rstd));
      a.add(std::vector<float>(n, 0.0f));
      a.add(std::vector<float>(C, 0.0f));
      a.add(std::vector<float>(C, 0.0f));
    };
    b.run = [=](Api api, Arrays& a) {
      ON(api, layer_norm_backward, a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.f(5), a.f(6), a.f(7), R, C);
    };
    b.reads = {0, 1, 2, 3, 4};
    b.writes = {5, 6, 7};
    cases.push_back(b);
  }

  // gelu.cu
  elementwise("gelu_forward(exact)", 8, [n](Api api, Arrays& a) { ON(api, gelu_forward, Gelu::exact, a.f(0), a.f(1), n); },
              1);
  elementwise("gelu_backward(tanh)", 12,
              [n](Api api, Arrays& a) { ON(api, gelu_backward, Gelu::tanh, a.f(0), a.f(1), a.f(2), n); }, 2);

  // dropout.cu: the CPU's mask bit for bit.
  {
    Case c;
    c.kernel = "dropout_apply(p=0.1)";
    c.shape = dims({n});
    c.flops = static_cast<double>(n);
    c.bitwise = true;
    c.init = [=](Arrays& a) {
      a.add(data(n, -1.0f, 1.0f, 80));
      a.add(std::vector<float>(n, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) { ON(api, dropout_apply, a.f(0), a.f(1), n, 0.1f, 1234, 5); };
    c.reads = {0};
    c.writes = {1};
    cases.push_back(c);
  }

  // embedding.cu
  {
    const int64_t V = z.vocab, D = z.dim, T = z.tokens;
    Case f;
    f.kernel = "embedding_forward";
    f.shape = dims({V, D}) + " gather " + dims({T});
    f.bitwise = true;
    f.init = [=](Arrays& a) {
      a.add(data(V * D, -1.0f, 1.0f, 90));
      a.add(ids(T, static_cast<int32_t>(V), 91));
      a.add(std::vector<float>(T * D, 0.0f));
    };
    f.run = [=](Api api, Arrays& a) { ON(api, embedding_forward, a.f(0), a.i32(1), a.f(2), T, V, D); };
    f.reads = {1};  // the table rows read are counted with the output below (T x D)
    f.writes = {2, 2};
    cases.push_back(f);
    Case b;
    b.kernel = "embedding_backward";
    b.shape = dims({T, D}) + " scatter " + dims({V, D});
    b.flops = static_cast<double>(T * D);
    b.bitwise = true;
    b.init = [=](Arrays& a) {
      a.add(data(T * D, -1.0f, 1.0f, 92));
      a.add(ids(T, static_cast<int32_t>(V), 91));
      a.add(std::vector<float>(V * D, 0.0f));
    };
    b.run = [=](Api api, Arrays& a) { ON(api, embedding_backward, a.f(0), a.i32(1), a.f(2), T, V, D); };
    b.reads = {0, 1};
    b.writes = {2};
    cases.push_back(b);
  }

  // gemm.cu (cuBLAS; the emulated build is the CPU's own GEMM).
  {
    const int64_t B = z.batch, M = z.m, N = z.n, K = z.k;
    Case c;
    c.kernel = "gemm_batched(nt)";
    c.shape = dims({B, M, N, K});
    c.flops = 2.0 * static_cast<double>(B * M * N * K);
    c.tol = 1e-5;
    c.init = [=](Arrays& a) {
      a.add(data(B * M * K, -1.0f, 1.0f, 100));
      a.add(data(B * N * K, -1.0f, 1.0f, 101));
      a.add(data(B * M * N, -1.0f, 1.0f, 102));
    };
    c.run = [=](Api api, Arrays& a) {
      ON(api, gemm_batched, false, true, B, M, N, K, 1.0f, a.f(0), M * K, a.f(1), N * K, 0.5f, a.f(2), M * N);
    };
    c.reads = {0, 1, 2};
    c.writes = {2};
    cases.push_back(c);
  }

  // layout.cu
  {
    Case c;
    const int64_t len = C / 2;
    c.kernel = "copy_rows";
    c.shape = rc + " -> " + dims({R, len});
    c.bitwise = true;
    c.init = [=](Arrays& a) {
      a.add(data(n, -1.0f, 1.0f, 110));
      a.add(std::vector<float>(R * len, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) { ON(api, copy_rows, a.f(0) + 1, C, a.f(1), len, R, len); };
    c.writes = {1, 1};  // reads as much as it writes
    cases.push_back(c);
  }
  {
    Case c;
    const int64_t B = std::max<int64_t>(1, n / (z.heads * z.seq * z.head_dim));
    const int64_t total = B * z.heads * z.seq * z.head_dim;
    c.kernel = "permute(0,2,1,3)";
    c.shape = dims({B, z.heads, z.seq, z.head_dim});
    c.bitwise = true;
    c.init = [=](Arrays& a) {
      a.add(data(total, -1.0f, 1.0f, 111));
      a.add(std::vector<float>(total, 0.0f));
    };
    c.run = [=](Api api, Arrays& a) {
      const int64_t shape[4] = {B, z.heads, z.seq, z.head_dim};
      const int order[4] = {0, 2, 1, 3};
      ON(api, permute, a.f(0), a.f(1), shape, order, 4);
    };
    c.reads = {0};
    c.writes = {1};
    cases.push_back(c);
  }

  // optim.cu
  {
    Case c;
    c.kernel = "adamw_step";
    c.shape = dims({n});
    c.flops = 16.0 * static_cast<double>(n);
    c.init = [=](Arrays& a) {
      a.add(data(n, -1.0f, 1.0f, 120));
      a.add(data(n, -0.1f, 0.1f, 121));
      a.add(data(n, -0.01f, 0.01f, 122));
      a.add(data(n, 0.0f, 0.001f, 123));
    };
    c.run = [=](Api api, Arrays& a) {
      kc::cpu::AdamWHyper h;
      h.lr = 1e-3f;
      h.weight_decay = 0.01f;
      h.step = 3;
      ON(api, adamw_step, a.f(0), a.f(1), a.f(2), a.f(3), n, h);
    };
    c.reads = {0, 1, 2, 3};
    c.writes = {0, 2, 3};
    cases.push_back(c);
  }
  {
    Case c;
    c.kernel = "sum_squares";
    c.shape = dims({n});
    c.flops = 2.0 * static_cast<double>(n);
    c.tol = 1e-9;
    c.init = [=](Arrays& a) { a.add(data(n, -1.0f, 1.0f, 130)); };
    c.run = [=](Api api, Arrays& a) { a.scalars = {ON(api, sum_squares, a.f(0), n)}; };
    c.reads = {0};
    cases.push_back(c);
  }
  {
    Case c;
    c.kernel = "scale_inplace";
    c.shape = dims({n});
    c.flops = static_cast<double>(n);
    c.bitwise = true;
    c.init = [=](Arrays& a) { a.add(data(n, -1.0f, 1.0f, 140)); };
    c.run = [=](Api api, Arrays& a) { ON(api, scale_inplace, a.f(0), n, 0.9999f); };
    c.reads = {0};
    c.writes = {0};
    cases.push_back(c);
  }

  // random.cu (kernels/random.h): uniform bit for bit; normal to a few ulp on a GPU.
  {
    Case u;
    u.kernel = "uniform_fill";
    u.shape = dims({n});
    u.bitwise = true;
    u.init = [=](Arrays& a) { a.add(std::vector<float>(n, 0.0f)); };
    u.run = [=](Api api, Arrays& a) { ON(api, uniform_fill, a.f(0), n, -1.0f, 1.0f, kc::PhiloxPosition{7, 3, 5}); };
    u.writes = {0};
    cases.push_back(u);
    Case g = u;
    g.kernel = "normal_fill";
    g.bitwise = false;
    g.run = [=](Api api, Arrays& a) { ON(api, normal_fill, a.f(0), n, 0.0f, 1.0f, kc::PhiloxPosition{7, 4, 5}); };
    cases.push_back(g);
  }
  return cases;
}

// max |got - want| / max |want| (1 when the sizes differ or a NaN appears on one side only).
double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 1.0;
  double worst = 0.0, scale = 1e-30;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return 1.0;
    if (!std::isnan(want[i])) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst / scale;
}

// Runs every case once on `api` and on the CPU, prints the comparison, returns the failures.
int check_all(Api api) {
  const char* order = std::getenv("TARN_EMU_ORDER");
  std::printf("# correctness on the %s against the CPU kernels, small shapes%s%s\n", api_name(api),
              api == Api::emu ? "; emulator thread order: " : "", api == Api::emu ? (order ? order : "forward") : "");
  std::printf("%-24s %-34s %12s %10s  %s\n", "kernel", "shape", "max_rel_err", "tolerance", "result");
  int failures = 0;
  for (const Case& c : make_cases(kSmall)) {
    Arrays want(Api::cpu), got(api);
    c.init(want);
    c.init(got);
    std::string note;
    double err = 0.0;
    bool ok = true;
    try {
      c.run(Api::cpu, want);
      c.run(api, got);
      for (int w : c.writes) {
        const auto g = got.read(w), r = want.read(w);
        err = std::max(err, max_rel_err(g, r));
        if (c.bitwise) ok = ok && g.size() == r.size() && std::memcmp(g.data(), r.data(), g.size() * 4) == 0;
      }
      for (size_t i = 0; i < want.scalars.size(); ++i) {
        const double r = want.scalars[i], g = i < got.scalars.size() ? got.scalars[i] : NAN;
        err = std::max(err, std::fabs(g - r) / std::max(std::fabs(r), 1e-30));
      }
      ok = ok && err <= c.tol && !std::isnan(err);
      if (c.bitwise) note = ok ? " (bitwise)" : " (bits differ)";
    } catch (const std::exception& e) {
      ok = false;
      note = std::string(" threw: ") + e.what();
    }
    failures += !ok;
    std::printf("%-24s %-34s %12.3g %10.1g  %s%s\n", c.kernel.c_str(), c.shape.c_str(), err, c.bitwise ? 0.0 : c.tol,
                ok ? "ok" : "FAIL", note.c_str());
  }
  return failures;
}

#if defined(TARN_WITH_CUDA)

int time_all(const Size& size, int repeats) {
  const tarn::bench::GpuPeaks dev = tarn::bench::query_gpu_peaks(0);
  const double peak_flops = dev.f32_flops;
  const double peak_bytes = dev.bytes_per_s;
  std::printf("# device: %s (sm_%d%d), %d SMs at %.0f MHz: f32 FMA peak %.1f TFLOP/s; memory %.0f GB/s; L2 %.0f MiB\n",
              dev.name.c_str(), dev.major, dev.minor, dev.sms, dev.clock_hz / 1e6, peak_flops / 1e12,
              peak_bytes / 1e9, dev.l2_bytes / 1048576.0);
  const size_t flush_bytes = std::max<size_t>(2 * static_cast<size_t>(dev.l2_bytes), size_t{64} << 20);
  std::printf("# each call: L2 flushed (a %zu MiB memset), then timed with CUDA events; median of %d\n",
              flush_bytes >> 20, repeats);
  void* flush = kc::cuda::device_malloc(flush_bytes, 0);

  std::printf("kernel,shape,median_us,gbytes,gbps,fraction_of_bandwidth,gflop,tflops,fraction_of_fp32_peak\n");
  for (const Case& c : make_cases(size)) {
    Arrays a(Api::gpu);
    c.init(a);
    double bytes = 0.0;
    for (int r : c.reads) bytes += static_cast<double>(a.bytes(r));
    for (int w : c.writes) bytes += static_cast<double>(a.bytes(w));
    c.run(Api::gpu, a);  // warm-up: first-call setup (cuBLAS handles, module loading)
    std::vector<float> ms(repeats);
    kc::cuda::Event start, stop;
    for (int r = 0; r < repeats; ++r) {
      const cudaError_t err = cudaMemsetAsync(flush, r & 0xff, flush_bytes, nullptr);
      TARN_CHECK(err == cudaSuccess, "cudaMemsetAsync (L2 flush) failed: ", cudaGetErrorString(err));
      start.record();
      c.run(Api::gpu, a);
      stop.record();
      stop.synchronize();
      ms[r] = kc::cuda::Event::elapsed_ms(start, stop);
    }
    std::nth_element(ms.begin(), ms.begin() + repeats / 2, ms.end());
    const double s = ms[repeats / 2] * 1e-3;
    std::printf("%s,%s,%.2f,%.4f,%.1f,%.3f,%.4f,%.3f,%.3f\n", c.kernel.c_str(), c.shape.c_str(), s * 1e6, bytes / 1e9,
                bytes / s / 1e9, bytes / s / peak_bytes, c.flops / 1e9, c.flops / s / 1e12, c.flops / s / peak_flops);
    std::fflush(stdout);
  }
  kc::cuda::device_free(flush, 0);
  return 0;
}

#endif

constexpr const char* kDescription = R"(Every CUDA kernel of kernels/cuda_kernels.h (and the random fills of kernels/random.h)
against the CPU kernel of the same name, and, on a GPU, timed.

Without a GPU (or without the CUDA backend) each kernel runs once on the CUDA emulator
(tarn::kernels::cuda_emu) on a small shape that is no multiple of any tile, and a
correctness table compares it with the CPU kernel; timings need a GPU and are not printed.
With a GPU the same check runs on the hardware first, then every kernel is timed on a
training-sized shape: CUDA events around each call, the L2 cache flushed before each by
writing a buffer twice its size, the median of the repeats. Output is CSV on stdout:
  kernel,shape,median_us,gbytes,gbps,fraction_of_bandwidth,gflop,tflops,fraction_of_fp32_peak
where gbytes is the call's compulsory traffic (each input read once, each output written once)
and the peaks come from the device: memory clock x bus width x 2 (DDR), and SMs x FP32 lanes
per SM x 2 (FMA) x SM clock. Attention has its own bench (cuda_attention_bench).
Exit status 1 when a kernel disagrees with the CPU.)";

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  if (const std::optional<int> status = tarn::bench::start_bench(
          argc, argv, kDescription, "cuda_kernels_bench", quick,
          "time smaller shapes (2048 x 1024 rows x cols, not 8192 x 4096) and 5 repeats, not 20"))
    return *status;
  try {
#if defined(TARN_WITH_CUDA)
    if (kc::cuda::device_count() > 0) {
      const int failures = check_all(Api::gpu);
      if (failures) {
        std::printf("# %d kernel(s) disagree with the CPU on the GPU: not timing\n", failures);
        return 1;
      }
      return time_all(quick ? kQuick : kLarge, quick ? 5 : 20);
    }
    std::printf("# no CUDA device (cudaGetDeviceCount() == 0): checking on the emulator instead\n");
#else
    (void)quick;
    std::printf("# tarn was built without the CUDA backend (TARN_CUDA=OFF): checking on the emulator instead\n");
#endif
    const int failures = check_all(Api::emu);
    std::printf("# %s; timings (GB/s, TFLOP/s against the device's peaks) need a GPU\n",
                failures ? (std::to_string(failures) + " kernel(s) disagree with the CPU").c_str()
                         : "every kernel agrees with the CPU");
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernels_bench: %s\n", e.what());
    return 1;
  }
}
