// Linear attention on the CPU: argument checks, the per-thread workspace, the parallel loop
// over (batch, head) slices and the entry points of kernels/linear_attention.h. The passes
// themselves live in linear_attention_causal.cpp and linear_attention_bidirectional.cpp.
#include "kernels/linear_attention.h"

#include <omp.h>

#include <algorithm>

#include "kernels/check.h"
#include "kernels/cpu/linear_attention_internal.h"

namespace tarn::kernels::cpu {

using namespace linear_attention_detail;
using simd::padded;

namespace {

Geometry make_geometry(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  Geometry g{dims.batch, dims.heads, dims.n_q, dims.n_k, dims.d, dims.e, 0, 0, 0, 0};
  // A short sequence (an 18-token sentence) gets an 18-row chunk, not a padded 64-row one.
  g.chunk = std::max<int64_t>(1, std::min<int64_t>(cfg.chunk, std::max(dims.n_q, dims.n_k)));
  g.dp = padded(g.d);
  g.ep = padded(g.e);
  g.cp = padded(g.chunk);
  return g;
}

void check_args(const char* op, const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  TARN_CHECK(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
             ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q,
             ", Nk=", dims.n_k, ")");
  TARN_CHECK(dims.d > 0 && dims.e > 0, op, ": feature dim d=", dims.d, " and value dim e=",
             dims.e, " must be positive");
  TARN_CHECK(!cfg.causal || dims.n_q == dims.n_k, op, ": causal attention needs Nq == Nk, got Nq=",
             dims.n_q, " Nk=", dims.n_k);
  TARN_CHECK(cfg.chunk > 0, op, ": chunk must be positive, got ", cfg.chunk);
  TARN_CHECK(cfg.eps > 0.0f, op, ": eps must be positive, got ", cfg.eps);
  TARN_CHECK(feature_map_is_row_local(cfg.feature_map), op, ": the ",
             feature_map_name(cfg.feature_map),
             " feature map cannot be fused; apply it first and pass identity");
}

// ---- driver ----

Slice slice_of(const Geometry& g, const LinearAttentionConfig& cfg, int64_t bh, const float* a,
               const float* b, const float* v) {
  Slice s{};
  s.a = a + bh * g.n_q * g.d;
  s.b = b + bh * g.n_k * g.d;
  s.v = v + bh * g.n_k * g.e;
  s.pad = cfg.key_padding_mask ? cfg.key_padding_mask + (bh / g.heads) * g.n_k : nullptr;
  return s;
}

// Threads worth using: no more than the slices, and one for tiny problems (a decoding step,
// a gradient check), where a parallel region costs more than it saves. The workspace
// queries size for this many, so a small B*H on a many-core machine allocates little.
int planned_threads(const Geometry& g) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 16;  // multiply-adds
  const int64_t slices = g.batch * g.heads;
  const int64_t work = slices * std::max(g.n_q, g.n_k) * g.d * g.e;
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({omp_get_max_threads(), slices, work / kMinWorkPerThread})));
}

// Runs fn(slice index, buffers) over the B*H slices on as many threads as the workspace
// holds buffers for.
template <class Fn>
void for_each_slice(const char* op, const Geometry& g, Pass pass, float* workspace,
                    size_t workspace_floats, Fn fn) {
  const int64_t slices = g.batch * g.heads;
  if (slices == 0) return;
  const int64_t per_thread = per_thread_floats(g, pass);
  const int64_t fits = static_cast<int64_t>(workspace_floats) / per_thread;
  TARN_CHECK(workspace && fits >= 1, op, ": workspace of ", workspace_floats,
             " floats is smaller than one thread's ", per_thread);
  const int threads = static_cast<int>(std::min<int64_t>(planned_threads(g), fits));
#pragma omp parallel num_threads(threads)
  {
    Arena arena(workspace + omp_get_thread_num() * per_thread);
    const Buffers w(arena, g, pass);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < slices; ++bh) fn(bh, w);
  }
}

}  // namespace

size_t linear_attention_forward_workspace_floats(const LinearAttentionDims& dims,
                                                 const LinearAttentionConfig& cfg) {
  check_args("linear_attention_forward", dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  return static_cast<size_t>(per_thread_floats(g, Pass::forward) * planned_threads(g));
}

size_t linear_attention_backward_workspace_floats(const LinearAttentionDims& dims,
                                                  const LinearAttentionConfig& cfg) {
  check_args("linear_attention_backward", dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  return static_cast<size_t>(per_thread_floats(g, Pass::backward) * planned_threads(g));
}

void linear_attention_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                              const float* a, const float* b, const float* v, float* out,
                              float* den, float* workspace, size_t workspace_floats) {
  check_args("linear_attention_forward", dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  for_each_slice("linear_attention_forward", g, Pass::forward, workspace, workspace_floats,
                 [&](int64_t bh, const Buffers& w) {
                   Slice s = slice_of(g, cfg, bh, a, b, v);
                   s.out_w = out + bh * g.n_q * g.e;
                   s.den_w = den + bh * g.n_q;
                   if (cfg.causal)
                     causal_forward_slice(g, cfg, s, w);
                   else
                     bidirectional_forward_slice(g, cfg, s, w);
                 });
}

void linear_attention_backward(const LinearAttentionDims& dims,
                               const LinearAttentionConfig& cfg, const float* a, const float* b,
                               const float* v, const float* out, const float* den,
                               const float* dout, float* da, float* db, float* dv,
                               float* workspace, size_t workspace_floats) {
  check_args("linear_attention_backward", dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  if (!da && !db && !dv) return;
  for_each_slice("linear_attention_backward", g, Pass::backward, workspace, workspace_floats,
                 [&](int64_t bh, const Buffers& w) {
                   Slice s = slice_of(g, cfg, bh, a, b, v);
                   s.out = out + bh * g.n_q * g.e;
                   s.den = den + bh * g.n_q;
                   s.dout = dout + bh * g.n_q * g.e;
                   s.da = da ? da + bh * g.n_q * g.d : nullptr;
                   s.db = db ? db + bh * g.n_k * g.d : nullptr;
                   s.dv = dv ? dv + bh * g.n_k * g.e : nullptr;
                   if (!cfg.causal) {
                     bidirectional_backward_slice(g, cfg, s, w);
                     return;
                   }
                   if (s.da) causal_backward_da(g, cfg, s, w);
                   if (s.db || s.dv) causal_backward_db_dv(g, cfg, s, w);
                 });
}

// ---- FLOP count (see the header) ----

double linear_attention_flops(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                              bool backward) {
  const double d = double(dims.d), ep = double(dims.e + 1), slices = double(dims.batch * dims.heads);
  if (!cfg.causal) {
    const double nq = double(dims.n_q), nk = double(dims.n_k);
    const double f = backward ? 4 * nq * d * ep + 6 * nk * d * ep : 2 * nk * d * ep + 2 * nq * d * ep;
    return slices * f;
  }
  const int64_t n = dims.n_q;
  const int64_t C = std::max<int64_t>(1, std::min<int64_t>(cfg.chunk, n));
  double total = 0.0;
  for (int64_t r0 = 0; r0 < n; r0 += C) {
    const double r = double(std::min(C, n - r0)), t = r * (r + 1) / 2;
    total += backward ? 10 * r * d * ep + 6 * t * (d + ep) : 4 * r * d * ep + 2 * t * (d + ep);
  }
  return slices * total;
}

}  // namespace tarn::kernels::cpu
