// bf16 GEMM on the CPU (kernels/gemm.h): oneDNN's matmul primitive where the CPU has bf16
// instructions (AVX512-BF16 or AMX) and tarn was built with oneDNN, else widen and sgemm.
//
// A oneDNN primitive is compiled for one set of dimensions and strides (with runtime
// dimensions it falls back to a slower implementation: "gemm:jit" or, with every dimension at
// run time, the reference loops). Creating one costs 0.03-0.6 ms, measured here, against
// 0.6-20 ms for the products of the small preset, so primitives are kept by shape: a training
// run meets a few dozen shapes per batch length (`tarn train` and train_bench log how many were made).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <tuple>
#include <vector>

#include "kernels/cast.h"
#include "kernels/check.h"
#include "kernels/gemm.h"

#if defined(TARN_HAVE_DNNL)
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_version.h>

#include <map>
#endif

namespace tarn::kernels::cpu {
namespace {

// Elements of a strided batch of matrices of `size` elements each, as far as they are read.
int64_t span(int64_t batch, int64_t stride, int64_t size) { return (stride == 0 ? 0 : (batch - 1) * stride) + size; }

// No bf16 hardware (or no oneDNN): the exact bf16 values in f32, then sgemm.
void widened(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
             int64_t sa, const bf16* B, int64_t sb, float beta, float* C, int64_t sc) {
  std::vector<float> a(static_cast<size_t>(span(batch, sa, M * K))), b(static_cast<size_t>(span(batch, sb, K * N)));
  cast_from_bf16(A, a.data(), static_cast<int64_t>(a.size()));
  cast_from_bf16(B, b.data(), static_cast<int64_t>(b.size()));
  gemm_batched(ta, tb, batch, M, N, K, alpha, a.data(), sa, b.data(), sb, beta, C, sc);
}

#if defined(TARN_HAVE_DNNL)
const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "other";
  }
}

bool isa_has_bf16(dnnl::cpu_isa isa) {
  const unsigned bf16_bits = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (static_cast<unsigned>(isa) & bf16_bits) == bf16_bits;  // oneDNN's ISAs nest as bit sets
}

bool dnnl_native() {
  static const bool native = isa_has_bf16(dnnl::get_effective_cpu_isa());
  return native;
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One product shape: batch counts of A and B (1 = shared), the extents, the strides, alpha, beta.
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       float, float>;

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c;
};

std::mutex g_cache_mutex;
std::map<Key, Primitive> g_cache;
std::atomic<int64_t> g_created{0};
constexpr size_t kMaxCachedPrimitives = 4096;  // a bound, not a working set: cleared when reached

dnnl::memory::desc matrix_desc(dnnl::memory::data_type type, int64_t batch, int64_t stride, int64_t rows,
                               int64_t cols, int64_t row_stride, int64_t col_stride) {
  using dims = dnnl::memory::dims;
  if (batch == 0) return dnnl::memory::desc(dims{rows, cols}, type, dims{row_stride, col_stride});
  return dnnl::memory::desc(dims{batch, rows, cols}, type, dims{stride, row_stride, col_stride});
}

// batch_a / batch_b / batch_c: 0 for plain 2-D matrices, else the batch extent (1 = shared).
Primitive primitive(bool ta, bool tb, int64_t batch_a, int64_t batch_b, int64_t batch_c, int64_t M, int64_t N,
                    int64_t K, int64_t sa, int64_t sb, int64_t sc, float alpha, float beta) {
  const Key key{ta, tb, batch_a, batch_b, batch_c, M, N, K, sa, sb, sc, alpha, beta};
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) return it->second;
  }
  using dt = dnnl::memory::data_type;
  const auto a = matrix_desc(dt::bf16, batch_a, sa, M, K, ta ? 1 : K, ta ? M : 1);
  const auto b = matrix_desc(dt::bf16, batch_b, sb, K, N, tb ? 1 : N, tb ? K : 1);
  const auto c = matrix_desc(dt::f32, batch_c, sc, M, N, N, 1);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const Primitive made{dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine())), a, b, c};
  ++g_created;
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  if (g_cache.size() >= kMaxCachedPrimitives) g_cache.clear();
  g_cache.emplace(key, made);
  return made;
}

void run(const Primitive& p, const bf16* A, const bf16* B, float* C) {
  dnnl::stream stream(engine());
  dnnl::memory a(p.a, engine(), const_cast<bf16*>(A));
  dnnl::memory b(p.b, engine(), const_cast<bf16*>(B));
  dnnl::memory c(p.c, engine(), C);
  p.matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  stream.wait();
}

void with_dnnl(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               int64_t sa, const bf16* B, int64_t sb, float beta, float* C, int64_t sc) {
  try {
    if (sc == 0 || batch == 1) {  // one 2-D product at a time (sc == 0: all into one C)
      for (int64_t i = 0; i < batch; ++i) {
        const float beta_i = (sc == 0 && i > 0) ? 1.0f : beta;
        run(primitive(ta, tb, 0, 0, 0, M, N, K, 0, 0, 0, alpha, beta_i), A + i * sa, B + i * sb, C + i * sc);
      }
      return;
    }
    run(primitive(ta, tb, sa == 0 ? 1 : batch, sb == 0 ? 1 : batch, batch, M, N, K, sa == 0 ? M * K : sa,
                  sb == 0 ? K * N : sb, sc, alpha, beta),
        A, B, C);
  } catch (const dnnl::error& e) {
    TARN_CHECK(false, "oneDNN bf16 matmul failed (M ", M, ", N ", N, ", K ", K, ", batch ", batch, "): ", e.what());
  }
}
#endif

}  // namespace

void gemm_batched_bf16(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                       int64_t sa, const bf16* B, int64_t sb, float beta, float* C, int64_t sc) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if (K == 0) {  // empty inner dimension: C = beta * C, as the f32 GEMM
    gemm_batched(ta, tb, batch, M, N, K, alpha, nullptr, sa, nullptr, sb, beta, C, sc);
    return;
  }
#if defined(TARN_HAVE_DNNL)
  if (dnnl_native()) {
    with_dnnl(ta, tb, batch, M, N, K, alpha, A, sa, B, sb, beta, C, sc);
    return;
  }
#endif
  widened(ta, tb, batch, M, N, K, alpha, A, sa, B, sb, beta, C, sc);
}

Bf16GemmEngine bf16_gemm_engine(int) {
#if defined(TARN_HAVE_DNNL)
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn =
      "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  if (isa_has_bf16(isa)) return {true, onednn + " bf16 matmul (" + isa_name(isa) + ")"};
  return {false, std::string("this CPU has no bf16 instructions (") + onednn + " sees " + isa_name(isa) +
                     "; bf16 needs AVX512-BF16 or AMX)"};
#else
  return {false, "this tarn was built without oneDNN (install libdnnl-dev with tools/setup.sh and rebuild)"};
#endif
}

int64_t bf16_gemm_primitives_created() {
#if defined(TARN_HAVE_DNNL)
  return g_created.load();
#else
  return 0;
#endif
}

}  // namespace tarn::kernels::cpu
