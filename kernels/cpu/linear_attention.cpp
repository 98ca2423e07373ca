// Linear attention on the CPU: the causal chunked scan, the bidirectional product and their
// memory-efficient backward passes (DESIGN.md section 2; entry points in
// kernels/linear_attention.h).
//
// Per (batch, head) slice, with chunks of C rows, padded tiles in a per-thread workspace:
//   a: C x dp   b: C x dp   bt = b^T: dp x C   v: C x ep   vt = v^T: ep x C
//   g: C x ep (dO / (den + eps))   ge: C (-(dO . out) / (den + eps))
//   p, dd: C x C (masked a b^T and g v'^T)   S, St, R, Rt: d x e state tiles
// where dp, ep, C are rounded up to the SIMD width. The ones column of V' = [V | 1] is
// carried separately as the vectors z = sum b_j and ge (same maths, fewer padded columns).
#include "kernels/linear_attention.h"

#include <omp.h>

#include <algorithm>

#include "kernels/check.h"
#include "kernels/cpu/linear_attention_simd.h"

namespace tarn::kernels::cpu {

using simd::Arena;
using simd::gemm;
using simd::padded;
using simd::rows_of;
using simd::Tri;
using simd::transpose_of;

namespace {

struct Geometry {
  int64_t batch, heads, n_q, n_k, d, e;
  int64_t chunk;       // rows per chunk, never more than the longest sequence
  int64_t dp, ep, cp;  // d, e, chunk rounded up to the SIMD width
};

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

enum class Pass { forward, backward };

// One thread's tiles. Forward uses a, b, bt, v, p, tile_e, s, z; backward all of them.
struct Buffers {
  float *a, *b, *bt, *v, *vt, *gu, *ge, *p, *dd, *tile_d, *tile_e, *s, *st, *s2, *z, *z2;
  Buffers(Arena& ar, const Geometry& g, Pass pass) {
    const bool bwd = pass == Pass::backward;
    a = ar.take(g.cp * g.dp);
    b = ar.take(g.cp * g.dp);
    bt = ar.take(g.dp * g.cp);
    v = ar.take(g.cp * g.ep);
    p = ar.take(g.cp * g.cp);
    tile_e = ar.take(g.cp * g.ep);
    s = ar.take(g.dp * g.ep);
    z = ar.take(g.dp);
    vt = bwd ? ar.take(g.ep * g.cp) : nullptr;
    gu = bwd ? ar.take(g.cp * g.ep) : nullptr;  // G without its last column (that is ge)
    ge = bwd ? ar.take(g.cp) : nullptr;
    dd = bwd ? ar.take(g.cp * g.cp) : nullptr;
    tile_d = bwd ? ar.take(g.cp * g.dp) : nullptr;
    st = bwd ? ar.take(g.ep * g.dp) : nullptr;
    s2 = bwd ? ar.take(g.ep * g.dp) : nullptr;
    z2 = bwd ? ar.take(g.dp) : nullptr;
  }
};

int64_t per_thread_floats(const Geometry& g, Pass pass) {
  Arena counter(nullptr);
  Buffers unused(counter, g, pass);
  return counter.used();
}

// One (batch, head) slice of every tensor.
struct Slice {
  const float *a, *b, *v, *out, *den, *dout;
  const float* pad;  // (n_k) key padding flags or null
  float *out_w, *den_w, *da, *db, *dv;
};

// ---- chunk loaders ----

// Asks for rows [r0, r0 + r) of a (rows, width) tensor to be brought into cache while the
// current chunk computes: the scans jump 16 KB per tensor per chunk (backwards in the
// reverse scan), which the hardware prefetchers pick up late.
void prefetch_rows(const float* base, int64_t width, int64_t r0, int64_t r) {
  if (!base || r <= 0) return;
  constexpr int64_t kLineFloats = 64 / sizeof(float);
  const float* p = base + r0 * width;
  for (int64_t i = 0; i < r * width; i += kLineFloats) __builtin_prefetch(p + i);
}

// The next chunk's inputs of a scan (null tensors are skipped).
void prefetch_chunk(const Geometry& g, const float* qa, const float* kb, const float* v,
                    const float* dout, const float* out, int64_t r0, int64_t n) {
  if (r0 < 0 || r0 >= n) return;
  const int64_t r = std::min(g.chunk, n - r0);
  prefetch_rows(qa, g.d, r0, r);
  prefetch_rows(kb, g.d, r0, r);
  prefetch_rows(v, g.e, r0, r);
  prefetch_rows(dout, g.e, r0, r);
  prefetch_rows(out, g.e, r0, r);
}

// Rows [r0, r0 + r) of q or k through the fused feature map into a padded tile (ld dp);
// padded keys become zero rows, so they add nothing to any product or state.
void load_features(const Geometry& g, FeatureMap phi, const float* src, const float* pad,
                   int64_t r0, int64_t r, float* dst) {
  feature_map_rows_forward(phi, r, g.d, src + r0 * g.d, g.d, dst, g.dp);
  for (int64_t i = 0; i < r; ++i) {
    float* row = dst + i * g.dp;
    const bool masked = pad && pad[r0 + i] != 0.0f;
    std::fill(row + (masked ? 0 : g.d), row + g.dp, 0.0f);
  }
}

void load_values(const Geometry& g, const float* v, int64_t r0, int64_t r, float* dst) {
  simd::copy_padded(v + r0 * g.e, r, g.e, g.e, dst, g.ep, g.ep);
}

// G = [dO / (den + eps) | -(dO . out) / (den + eps)] (DESIGN.md section 2): the gradient
// with respect to U = [num | den]. The last column goes to ge.
void load_g(const Geometry& g, const Slice& s, float eps, int64_t r0, int64_t r, float* gt,
            float* ge) {
  for (int64_t i = 0; i < r; ++i) {
    const float* dor = s.dout + (r0 + i) * g.e;
    const float* outr = s.out + (r0 + i) * g.e;
    const float inv = 1.0f / (s.den[r0 + i] + eps);
    float* row = gt + i * g.ep;
    for (int64_t k = 0; k < g.e; ++k) row[k] = dor[k] * inv;
    std::fill(row + g.e, row + g.ep, 0.0f);
    ge[i] = -simd::dot(dor, outr, g.e) * inv;
  }
}

// z += sum of the r rows of x (ld dp): the ones column's share of a state update.
void add_column_sums(const Geometry& g, const float* x, int64_t r, float* z) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < g.dp; ++k) z[k] += x[i * g.dp + k];
}

// z += sum_i w_i x_i (rows of x, ld dp).
void add_weighted_rows(const Geometry& g, const float* x, const float* w, int64_t r, float* z) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < g.dp; ++k) z[k] += w[i] * x[i * g.dp + k];
}

// out rows = u / (den + eps), first e columns of u (ld ldu; u may be out itself).
void write_output(const Geometry& g, const float* u, int64_t ldu, const float* den, float eps,
                  int64_t r, float* out) {
  for (int64_t i = 0; i < r; ++i) {
    const float inv = 1.0f / (den[i] + eps);
    for (int64_t k = 0; k < g.e; ++k) out[i * g.e + k] = u[i * ldu + k] * inv;
  }
}

// Rows [r0, r0 + r) of v as a GEMM right operand (width a multiple of the SIMD width): the
// input itself when e is such a multiple, else a zero-padded copy in `tile`.
const float* values_operand(const Geometry& g, const float* v, int64_t r0, int64_t r, float* tile) {
  if (g.e == g.ep) return v + r0 * g.e;
  load_values(g, v, r0, r, tile);
  return tile;
}

// Where a GEMM producing e-wide output rows [r0, r0 + r) should write: straight into the
// output tensor when its rows are a SIMD multiple wide, else into `tile` (ld ep).
float* values_target(const Geometry& g, float* out, int64_t r0, float* tile) {
  return g.e == g.ep ? out + r0 * g.e : tile;
}

// dK rows: chain the tile (ld dp) through phi' and zero the padded keys (constant zero rows).
void write_key_grad(const Geometry& g, FeatureMap phi, const Slice& s, int64_t r0, int64_t r,
                    const float* tile) {
  float* dst = s.db + r0 * g.d;
  feature_map_rows_backward(phi, r, g.d, s.b + r0 * g.d, g.d, tile, g.dp, dst, g.d);
  if (s.pad)
    for (int64_t i = 0; i < r; ++i)
      if (s.pad[r0 + i] != 0.0f) std::fill(dst + i * g.d, dst + (i + 1) * g.d, 0.0f);
}

// D = M_C o (g v'^T) = M_C o (g vt + ge 1^T) for an r-row chunk (rp = padded r).
void masked_g_vt(const Geometry& g, const Buffers& w, int64_t r, int64_t rp) {
  gemm(r, rp, g.e, rows_of(w.gu, g.ep), w.vt, g.cp, w.dd, g.cp, false, Tri::lower_out);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j <= i; ++j) w.dd[i * g.cp + j] += w.ge[i];
  simd::mask_strict_upper(w.dd, r, rp, g.cp);
}

// ---- causal ----

// U_c = A_c S'_c + (M_C o (A_c B_c^T)) V'_c;  S'_{c+1} = S'_c + B_c^T V'_c.
void causal_forward_slice(const Geometry& g, const LinearAttentionConfig& cfg, const Slice& s,
                          const Buffers& w) {
  const int64_t n = g.n_q, C = g.chunk;
  std::fill(w.s, w.s + g.dp * g.ep, 0.0f);
  std::fill(w.z, w.z + g.dp, 0.0f);
  for (int64_t r0 = 0; r0 < n; r0 += C) {
    const int64_t r = std::min(C, n - r0), rp = padded(r);
    float* den = s.den_w + r0;
    prefetch_chunk(g, s.a, s.b, s.v, nullptr, nullptr, r0 + C, n);
    load_features(g, cfg.feature_map, s.a, nullptr, r0, r, w.a);
    load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
    const float* v = values_operand(g, s.v, r0, r, w.v);
    simd::transpose(w.b, r, g.d, g.dp, w.bt, g.cp, rp);
    float* u = values_target(g, s.out_w, r0, w.tile_e);
    const int64_t ldu = g.e == g.ep ? g.e : g.ep;
    // Inter-chunk: the state of all earlier chunks.
    gemm(r, g.ep, g.d, rows_of(w.a, g.dp), w.s, g.ep, u, ldu, false);
    for (int64_t i = 0; i < r; ++i) den[i] = simd::dot(w.a + i * g.dp, w.z, g.dp);
    // Intra-chunk: the masked C x C scores.
    gemm(r, rp, g.d, rows_of(w.a, g.dp), w.bt, g.cp, w.p, g.cp, false, Tri::lower_out);
    simd::mask_strict_upper(w.p, r, rp, g.cp);
    gemm(r, g.ep, r, rows_of(w.p, g.cp), v, g.ep == g.e ? g.e : g.ep, u, ldu, true, Tri::lower_k);
    for (int64_t i = 0; i < r; ++i) den[i] += simd::sum(w.p + i * g.cp, rp);
    // State update, then the outputs.
    gemm(g.d, g.ep, r, rows_of(w.bt, g.cp), v, g.ep == g.e ? g.e : g.ep, w.s, g.ep, true);
    add_column_sums(g, w.b, r, w.z);
    write_output(g, u, ldu, den, cfg.eps, r, s.out_w + r0 * g.e);
  }
}

// dA_c = G_c S'_c^T + (M_C o (G_c V'_c^T)) B_c, a forward scan recomputing S'_c as S'^T
// (st: e x dp, z) so that every product reads row-major operands.
void causal_backward_da(const Geometry& g, const LinearAttentionConfig& cfg, const Slice& s,
                        const Buffers& w) {
  const int64_t n = g.n_q, C = g.chunk;
  std::fill(w.st, w.st + g.ep * g.dp, 0.0f);
  std::fill(w.z, w.z + g.dp, 0.0f);
  for (int64_t r0 = 0; r0 < n; r0 += C) {
    const int64_t r = std::min(C, n - r0), rp = padded(r);
    prefetch_chunk(g, s.a, s.b, s.v, s.dout, s.out, r0 + C, n);
    load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
    load_g(g, s, cfg.eps, r0, r, w.gu, w.ge);
    simd::transpose(s.v + r0 * g.e, r, g.e, g.e, w.vt, g.cp, rp);
    gemm(r, g.dp, g.e, rows_of(w.gu, g.ep), w.st, g.dp, w.tile_d, g.dp, false);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t k = 0; k < g.dp; ++k) w.tile_d[i * g.dp + k] += w.ge[i] * w.z[k];
    masked_g_vt(g, w, r, rp);
    gemm(r, g.dp, r, rows_of(w.dd, g.cp), w.b, g.dp, w.tile_d, g.dp, true, Tri::lower_k);
    gemm(g.e, g.dp, r, rows_of(w.vt, g.cp), w.b, g.dp, w.st, g.dp, true);
    add_column_sums(g, w.b, r, w.z);
    feature_map_rows_backward(cfg.feature_map, r, g.d, s.a + r0 * g.d, g.d, w.tile_d, g.dp,
                              s.da + r0 * g.d, g.d);
  }
}

// The reverse scan with R'_c = sum over later chunks of a_i g'_i^T (R: dp x ep, re = its ones
// column, Rt = R^T):
//   dB_c = V'_c R'^T + (M_C^T o (V'_c G_c^T)) A_c,   dV_c = B_c R + (M_C^T o (B_c A_c^T)) G_c.
void causal_backward_db_dv(const Geometry& g, const LinearAttentionConfig& cfg, const Slice& s,
                           const Buffers& w) {
  const int64_t n = g.n_q, C = g.chunk;
  float* R = w.s;
  float* Rt = w.st;
  float* re = w.z;
  std::fill(R, R + g.dp * g.ep, 0.0f);
  std::fill(Rt, Rt + g.ep * g.dp, 0.0f);
  std::fill(re, re + g.dp, 0.0f);
  const int64_t chunks = (n + C - 1) / C;
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t r0 = c * C, r = std::min(C, n - r0), rp = padded(r);
    prefetch_chunk(g, s.a, s.b, s.v, s.dout, s.out, r0 - C, n);
    load_features(g, cfg.feature_map, s.a, nullptr, r0, r, w.a);
    load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
    load_g(g, s, cfg.eps, r0, r, w.gu, w.ge);
    if (s.db) {
      simd::transpose(s.v + r0 * g.e, r, g.e, g.e, w.vt, g.cp, rp);
      masked_g_vt(g, w, r, rp);
      gemm(r, g.dp, g.e, rows_of(s.v + r0 * g.e, g.e), Rt, g.dp, w.tile_d, g.dp, false);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < g.dp; ++k) w.tile_d[i * g.dp + k] += re[k];
      gemm(r, g.dp, r, transpose_of(w.dd, g.cp), w.a, g.dp, w.tile_d, g.dp, true, Tri::upper_k);
      write_key_grad(g, cfg.feature_map, s, r0, r, w.tile_d);
    }
    if (s.dv) {
      simd::transpose(w.b, r, g.d, g.dp, w.bt, g.cp, rp);
      gemm(r, rp, g.d, rows_of(w.a, g.dp), w.bt, g.cp, w.p, g.cp, false, Tri::lower_out);
      simd::mask_strict_upper(w.p, r, rp, g.cp);
      float* dv = values_target(g, s.dv, r0, w.tile_e);
      const int64_t lddv = g.e == g.ep ? g.e : g.ep;
      gemm(r, g.ep, g.d, rows_of(w.b, g.dp), R, g.ep, dv, lddv, false);
      gemm(r, g.ep, r, transpose_of(w.p, g.cp), w.gu, g.ep, dv, lddv, true, Tri::upper_k);
      if (dv == w.tile_e) simd::copy_padded(w.tile_e, r, g.e, g.ep, s.dv + r0 * g.e, g.e, g.e);
    }
    if (c > 0) {  // fold this chunk into R' for the chunks before it
      gemm(g.d, g.ep, r, transpose_of(w.a, g.dp), w.gu, g.ep, R, g.ep, true);
      if (s.db) simd::transpose(R, g.d, g.e, g.ep, Rt, g.dp, g.dp);
      add_weighted_rows(g, w.a, w.ge, r, re);
    }
  }
}

// ---- bidirectional / cross ----

// S' = B^T V' over all keys, then U = A S' per query chunk.
void bidirectional_forward_slice(const Geometry& g, const LinearAttentionConfig& cfg,
                                 const Slice& s, const Buffers& w) {
  const int64_t C = g.chunk;
  std::fill(w.s, w.s + g.dp * g.ep, 0.0f);
  std::fill(w.z, w.z + g.dp, 0.0f);
  for (int64_t r0 = 0; r0 < g.n_k; r0 += C) {
    const int64_t r = std::min(C, g.n_k - r0);
    load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
    const float* v = values_operand(g, s.v, r0, r, w.v);
    gemm(g.d, g.ep, r, transpose_of(w.b, g.dp), v, g.ep == g.e ? g.e : g.ep, w.s, g.ep, true);
    add_column_sums(g, w.b, r, w.z);
  }
  for (int64_t r0 = 0; r0 < g.n_q; r0 += C) {
    const int64_t r = std::min(C, g.n_q - r0);
    float* den = s.den_w + r0;
    load_features(g, cfg.feature_map, s.a, nullptr, r0, r, w.a);
    float* u = values_target(g, s.out_w, r0, w.tile_e);
    const int64_t ldu = g.e == g.ep ? g.e : g.ep;
    gemm(r, g.ep, g.d, rows_of(w.a, g.dp), w.s, g.ep, u, ldu, false);
    for (int64_t i = 0; i < r; ++i) den[i] = simd::dot(w.a + i * g.dp, w.z, g.dp);
    write_output(g, u, ldu, den, cfg.eps, r, s.out_w + r0 * g.e);
  }
}

// dA = G S'^T (St = S^T, z); R' = A^T G (R, Rt = R^T, re); dB = V' R'^T; dV = B R.
void bidirectional_backward_slice(const Geometry& g, const LinearAttentionConfig& cfg,
                                  const Slice& s, const Buffers& w) {
  const int64_t C = g.chunk;
  float* St = w.st;
  float* R = w.s;
  float* Rt = w.s2;
  float* z = w.z;
  float* re = w.z2;
  if (s.da) {
    std::fill(St, St + g.ep * g.dp, 0.0f);
    std::fill(z, z + g.dp, 0.0f);
    for (int64_t r0 = 0; r0 < g.n_k; r0 += C) {
      const int64_t r = std::min(C, g.n_k - r0);
      load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
      gemm(g.e, g.dp, r, transpose_of(s.v + r0 * g.e, g.e), w.b, g.dp, St, g.dp, true);
      add_column_sums(g, w.b, r, z);
    }
  }
  const bool key_grads = s.db || s.dv;
  if (key_grads) {
    std::fill(R, R + g.dp * g.ep, 0.0f);
    std::fill(re, re + g.dp, 0.0f);
  }
  for (int64_t r0 = 0; r0 < g.n_q; r0 += C) {
    const int64_t r = std::min(C, g.n_q - r0);
    load_g(g, s, cfg.eps, r0, r, w.gu, w.ge);
    if (key_grads) {
      load_features(g, cfg.feature_map, s.a, nullptr, r0, r, w.a);
      gemm(g.d, g.ep, r, transpose_of(w.a, g.dp), w.gu, g.ep, R, g.ep, true);
      add_weighted_rows(g, w.a, w.ge, r, re);
    }
    if (s.da) {
      gemm(r, g.dp, g.e, rows_of(w.gu, g.ep), St, g.dp, w.tile_d, g.dp, false);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < g.dp; ++k) w.tile_d[i * g.dp + k] += w.ge[i] * z[k];
      feature_map_rows_backward(cfg.feature_map, r, g.d, s.a + r0 * g.d, g.d, w.tile_d, g.dp,
                                s.da + r0 * g.d, g.d);
    }
  }
  if (!key_grads) return;
  if (s.db) simd::transpose(R, g.d, g.e, g.ep, Rt, g.dp, g.dp);
  for (int64_t r0 = 0; r0 < g.n_k; r0 += C) {
    const int64_t r = std::min(C, g.n_k - r0);
    if (s.db) {
      gemm(r, g.dp, g.e, rows_of(s.v + r0 * g.e, g.e), Rt, g.dp, w.tile_d, g.dp, false);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < g.dp; ++k) w.tile_d[i * g.dp + k] += re[k];
      write_key_grad(g, cfg.feature_map, s, r0, r, w.tile_d);
    }
    if (s.dv) {
      load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
      float* dv = values_target(g, s.dv, r0, w.tile_e);
      gemm(r, g.ep, g.d, rows_of(w.b, g.dp), R, g.ep, dv, g.e == g.ep ? g.e : g.ep, false);
      if (dv == w.tile_e) simd::copy_padded(w.tile_e, r, g.e, g.ep, s.dv + r0 * g.e, g.e, g.e);
    }
  }
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

// ---- recurrent step ----

void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                           const float* a, const float* b, const float* v, float* state,
                           float* out) {
  TARN_CHECK(dims.d > 0 && dims.e > 0 && dims.batch >= 0 && dims.heads >= 0,
             "linear_attention_step: bad dims d=", dims.d, " e=", dims.e);
  TARN_CHECK(feature_map_is_row_local(cfg.feature_map), "linear_attention_step: the ",
             feature_map_name(cfg.feature_map), " feature map cannot be fused");
  TARN_CHECK(cfg.eps > 0.0f, "linear_attention_step: eps must be positive, got ", cfg.eps);
  const int64_t slices = dims.batch * dims.heads, d = dims.d, e = dims.e, w = e + 1;
  // Below this much work per call, threads cost more than they save.
  constexpr int64_t kParallelMinFloats = 1 << 15;
  const FeatureMap phi = cfg.feature_map;
#pragma omp parallel for schedule(static) if (slices * d * w >= kParallelMinFloats)
  for (int64_t bh = 0; bh < slices; ++bh) {
    const float* ar = a + bh * d;
    const float* br = b + bh * d;
    const float* vr = v + bh * e;
    float* S = state + bh * d * w;
    float* o = out + bh * e;
    const bool masked = cfg.key_padding_mask && cfg.key_padding_mask[bh / dims.heads] != 0.0f;
    // phi one element at a time (the row max first for exp): the step needs no scratch.
    auto feature = [phi](float x, float row_max) {
      switch (phi) {
        case FeatureMap::elu1: return x > 0.0f ? x + 1.0f : simd::exp(x);
        case FeatureMap::relu: return std::max(x, 0.0f);
        case FeatureMap::exp: return simd::exp(x - row_max);
        default: return x;
      }
    };
    const float a_max = *std::max_element(ar, ar + d), b_max = *std::max_element(br, br + d);
    if (!masked)
      for (int64_t k = 0; k < d; ++k) {
        const float bk = feature(br[k], b_max);
        float* row = S + k * w;
        for (int64_t j = 0; j < e; ++j) row[j] += bk * vr[j];
        row[e] += bk;
      }
    std::fill(o, o + e, 0.0f);
    float den = 0.0f;
    for (int64_t k = 0; k < d; ++k) {
      const float ak = feature(ar[k], a_max);
      const float* row = S + k * w;
      for (int64_t j = 0; j < e; ++j) o[j] += ak * row[j];
      den += ak * row[e];
    }
    const float inv = 1.0f / (den + cfg.eps);
    for (int64_t j = 0; j < e; ++j) o[j] *= inv;
  }
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
