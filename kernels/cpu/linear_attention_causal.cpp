// The causal chunked scan of docs/design.md section 2 and its memory-efficient backward: a
// forward scan for dA and a reverse scan for dB and dV, both recomputing the chunk states,
// so no per-position d x e state is ever stored. Each scan covers a row range from a given
// starting state, so that linear_attention.cpp can split one sequence across threads; the
// *_sum functions compute the states a range hands on (pass 1 of that split).
#include <algorithm>
#include <initializer_list>

#include "kernels/cpu/linear_attention_internal.h"

namespace tarn::kernels::cpu::linear_attention_detail {

using simd::gemm;
using simd::padded;
using simd::rows_of;
using simd::Tri;
using simd::transpose_of;

namespace {
// The rows [r0, r0 + C) of the d-wide and e-wide tensors into L2 ahead of their chunk.
void prefetch_next_chunk(const Geometry& g, int64_t r0, std::initializer_list<const float*> d_wide,
                         std::initializer_list<const float*> e_wide) {
  if (r0 < 0 || r0 >= g.n_q) return;
  const int64_t r = std::min(g.chunk, g.n_q - r0);
  for (const float* p : d_wide) simd::prefetch_l2(p ? p + r0 * g.d : nullptr, r * g.d);
  for (const float* p : e_wide) simd::prefetch_l2(p ? p + r0 * g.e : nullptr, r * g.e);
}

// Starts a scan's carried state from `start` (null: zeros): S (dp x ep) into s and/or its
// transpose (ep x dp) into st, whichever of them is non-null, and z (dp).
void start_state(const Geometry& g, const ScanState& start, float* s, float* z, float* st) {
  if (s && start.s) std::copy(start.s, start.s + g.dp * g.ep, s);
  if (s && !start.s) std::fill(s, s + g.dp * g.ep, 0.0f);
  if (start.z)
    std::copy(start.z, start.z + g.dp, z);
  else
    std::fill(z, z + g.dp, 0.0f);
  if (!st) return;
  std::fill(st, st + g.ep * g.dp, 0.0f);
  if (start.s) simd::transpose(start.s, g.d, g.e, g.ep, st, g.dp, g.dp);
}
}  // namespace

// Pass 1 of a split scan: S' = sum b_j v'_j^T over the rows (S: dp x ep, z: dp; overwritten).
void causal_key_value_sum(const Geometry& g, const LinearAttentionConfig& cfg, const Slice& s,
                          const Buffers& w, RowRange rows, float* S, float* z) {
  std::fill(S, S + g.dp * g.ep, 0.0f);
  std::fill(z, z + g.dp, 0.0f);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += g.chunk) {
    const int64_t r = std::min(g.chunk, rows.end - r0);
    load_features(g, cfg.feature_map, s.b, s.pad, r0, r, w.b);
    const float* v = values_operand(g, s.v, r0, r, w.v);
    gemm(g.d, g.ep, r, transpose_of(w.b, g.dp), v, g.ep == g.e ? g.e : g.ep, S, g.ep, true);
    add_column_sums(g, w.b, r, z);
  }
}

// Pass 1 of a split reverse scan: R' = sum a_i g'_i^T over the rows (R: dp x ep, re: dp).
void causal_query_grad_sum(const Geometry& g, const LinearAttentionConfig& cfg, const Slice& s,
                           const Buffers& w, RowRange rows, float* R, float* re) {
  std::fill(R, R + g.dp * g.ep, 0.0f);
  std::fill(re, re + g.dp, 0.0f);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += g.chunk) {
    const int64_t r = std::min(g.chunk, rows.end - r0);
    load_features(g, cfg.feature_map, s.a, nullptr, r0, r, w.a);
    load_g(g, s, cfg.eps, r0, r, w.gu, w.ge);
    gemm(g.d, g.ep, r, transpose_of(w.a, g.dp), w.gu, g.ep, R, g.ep, true);
    add_weighted_rows(g, w.a, w.ge, r, re);
  }
}

// U_c = A_c S'_c + (M_C o (A_c B_c^T)) V'_c;  S'_{c+1} = S'_c + B_c^T V'_c.
void causal_forward_slice(const Geometry& g, const LinearAttentionConfig& cfg, const Slice& s,
                          const Buffers& w, RowRange rows, ScanState start) {
  const int64_t C = g.chunk;
  start_state(g, start, w.s, w.z, nullptr);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += C) {
    const int64_t r = std::min(C, rows.end - r0), rp = padded(r);
    float* den = s.den_w + r0;
    prefetch_next_chunk(g, r0 + C, {s.a, s.b}, {s.v, s.out_w});
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
                        const Buffers& w, RowRange rows, ScanState start) {
  const int64_t C = g.chunk;
  start_state(g, start, nullptr, w.z, w.st);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += C) {
    const int64_t r = std::min(C, rows.end - r0), rp = padded(r);
    prefetch_next_chunk(g, r0 + C, {s.a, s.b, s.da}, {s.v, s.out, s.dout});
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
                           const Buffers& w, RowRange rows, ScanState start) {
  const int64_t C = g.chunk;
  float* R = w.s;
  float* Rt = w.st;
  float* re = w.z;
  start_state(g, start, R, re, Rt);
  const int64_t first = rows.begin / C, last = (rows.end + C - 1) / C - 1;
  for (int64_t c = last; c >= first; --c) {
    const int64_t r0 = c * C, r = std::min(C, rows.end - r0), rp = padded(r);
    if (c > first) prefetch_next_chunk(g, r0 - C, {s.a, s.b, s.db}, {s.v, s.out, s.dout, s.dv});
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
    if (c > first) {  // fold this chunk into R' for the chunks before it
      gemm(g.d, g.ep, r, transpose_of(w.a, g.dp), w.gu, g.ep, R, g.ep, true);
      if (s.db) simd::transpose(R, g.d, g.e, g.ep, Rt, g.dp, g.dp);
      add_weighted_rows(g, w.a, w.ge, r, re);
    }
  }
}

}  // namespace tarn::kernels::cpu::linear_attention_detail
