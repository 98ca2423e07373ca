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
void prefetch_next_chunk(const Geometry& geo, int64_t r0, std::initializer_list<const float*> d_wide,
                         std::initializer_list<const float*> e_wide) {
  if (r0 < 0 || r0 >= geo.n_q) return;
  const int64_t r = std::min(geo.chunk, geo.n_q - r0);
  for (const float* p : d_wide) simd::prefetch_l2(p ? p + r0 * geo.d : nullptr, r * geo.d);
  for (const float* p : e_wide) simd::prefetch_l2(p ? p + r0 * geo.e : nullptr, r * geo.e);
}

// Starts a scan's carried state from `start` (null: zeros): S (dp x ep) into s and/or its
// transpose (ep x dp) into st, whichever of them is non-null, and z (dp).
void start_state(const Geometry& geo, const ScanState& start, float* s, float* z, float* st) {
  if (s && start.s) std::copy(start.s, start.s + geo.dp * geo.ep, s);
  if (s && !start.s) std::fill(s, s + geo.dp * geo.ep, 0.0f);
  if (start.z)
    std::copy(start.z, start.z + geo.dp, z);
  else
    std::fill(z, z + geo.dp, 0.0f);
  if (!st) return;
  std::fill(st, st + geo.ep * geo.dp, 0.0f);
  if (start.s) simd::transpose(start.s, geo.d, geo.e, geo.ep, st, geo.dp, geo.dp);
}

// A pass-1 sum (dp x ep) and its dp-vector, cleared before the rows are added in.
void zero_sums(const Geometry& geo, float* sum, float* vec) {
  std::fill(sum, sum + geo.dp * geo.ep, 0.0f);
  std::fill(vec, vec + geo.dp, 0.0f);
}

// fn(first row, row count) for each chunk of `rows`, in order: the last one may be shorter.
template <class Fn>
void for_each_chunk(const Geometry& geo, RowRange rows, Fn fn) {
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += geo.chunk) fn(r0, std::min(geo.chunk, rows.end - r0));
}
}  // namespace

// Pass 1 of a split scan: S' = sum b_j v'_j^T over the rows (S: dp x ep, z: dp; overwritten).
void causal_key_value_sum(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                          const Buffers& w, RowRange rows, float* S, float* z) {
  zero_sums(geo, S, z);
  for_each_chunk(geo, rows, [&](int64_t r0, int64_t r) {
    load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
    const float* v = values_operand(geo, slice.v, r0, r, w.v);
    gemm(geo.d, geo.ep, r, transpose_of(w.b, geo.dp), v, geo.ep == geo.e ? geo.e : geo.ep, S, geo.ep, true);
    add_column_sums(geo, w.b, r, z);
  });
}

// Pass 1 of a split reverse scan: R' = sum a_i g'_i^T over the rows (R: dp x ep, re: dp).
void causal_query_grad_sum(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                           const Buffers& w, RowRange rows, float* R, float* re) {
  zero_sums(geo, R, re);
  for_each_chunk(geo, rows, [&](int64_t r0, int64_t r) {
    load_features(geo, cfg.feature_map, slice.a, nullptr, r0, r, w.a);
    load_g(geo, slice, cfg.eps, r0, r, w.gu, w.ge);
    gemm(geo.d, geo.ep, r, transpose_of(w.a, geo.dp), w.gu, geo.ep, R, geo.ep, true);
    add_weighted_rows(geo, w.a, w.ge, r, re);
  });
}

// U_c = A_c S'_c + (M_C o (A_c B_c^T)) V'_c;  S'_{c+1} = S'_c + B_c^T V'_c.
void causal_forward_slice(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                          const Buffers& w, RowRange rows, ScanState start) {
  const int64_t C = geo.chunk;
  start_state(geo, start, w.s, w.z, nullptr);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += C) {
    const int64_t r = std::min(C, rows.end - r0), rp = padded(r);
    float* den = slice.den_w + r0;
    prefetch_next_chunk(geo, r0 + C, {slice.a, slice.b}, {slice.v, slice.out_w});
    load_features(geo, cfg.feature_map, slice.a, nullptr, r0, r, w.a);
    load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
    const float* v = values_operand(geo, slice.v, r0, r, w.v);
    simd::transpose(w.b, r, geo.d, geo.dp, w.bt, geo.cp, rp);
    float* u = values_target(geo, slice.out_w, r0, w.tile_e);
    const int64_t ldu = geo.e == geo.ep ? geo.e : geo.ep;
    // Inter-chunk: the state of all earlier chunks.
    gemm(r, geo.ep, geo.d, rows_of(w.a, geo.dp), w.s, geo.ep, u, ldu, false);
    for (int64_t i = 0; i < r; ++i) den[i] = simd::dot(w.a + i * geo.dp, w.z, geo.dp);
    // Intra-chunk: the masked C x C scores.
    gemm(r, rp, geo.d, rows_of(w.a, geo.dp), w.bt, geo.cp, w.p, geo.cp, false, Tri::lower_out);
    simd::mask_strict_upper(w.p, r, rp, geo.cp);
    gemm(r, geo.ep, r, rows_of(w.p, geo.cp), v, geo.ep == geo.e ? geo.e : geo.ep, u, ldu, true, Tri::lower_k);
    for (int64_t i = 0; i < r; ++i) den[i] += simd::sum(w.p + i * geo.cp, rp);
    // State update, then the outputs.
    gemm(geo.d, geo.ep, r, rows_of(w.bt, geo.cp), v, geo.ep == geo.e ? geo.e : geo.ep, w.s, geo.ep, true);
    add_column_sums(geo, w.b, r, w.z);
    write_output(geo, u, ldu, den, cfg.eps, r, slice.out_w + r0 * geo.e);
  }
}

// dA_c = G_c S'_c^T + (M_C o (G_c V'_c^T)) B_c, a forward scan recomputing S'_c as S'^T
// (st: e x dp, z) so that every product reads row-major operands.
void causal_backward_da(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                        const Buffers& w, RowRange rows, ScanState start) {
  const int64_t C = geo.chunk;
  start_state(geo, start, nullptr, w.z, w.st);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += C) {
    const int64_t r = std::min(C, rows.end - r0), rp = padded(r);
    prefetch_next_chunk(geo, r0 + C, {slice.a, slice.b, slice.da}, {slice.v, slice.out, slice.dout});
    load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
    load_g(geo, slice, cfg.eps, r0, r, w.gu, w.ge);
    simd::transpose(slice.v + r0 * geo.e, r, geo.e, geo.e, w.vt, geo.cp, rp);
    gemm(r, geo.dp, geo.e, rows_of(w.gu, geo.ep), w.st, geo.dp, w.tile_d, geo.dp, false);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t k = 0; k < geo.dp; ++k) w.tile_d[i * geo.dp + k] += w.ge[i] * w.z[k];
    masked_g_vt(geo, w, r, rp);
    gemm(r, geo.dp, r, rows_of(w.dd, geo.cp), w.b, geo.dp, w.tile_d, geo.dp, true, Tri::lower_k);
    gemm(geo.e, geo.dp, r, rows_of(w.vt, geo.cp), w.b, geo.dp, w.st, geo.dp, true);
    add_column_sums(geo, w.b, r, w.z);
    feature_map_rows_backward(cfg.feature_map, r, geo.d, slice.a + r0 * geo.d, geo.d, w.tile_d, geo.dp,
                              slice.da + r0 * geo.d, geo.d);
  }
}

// The reverse scan with R'_c = sum over later chunks of a_i g'_i^T (R: dp x ep, re = its ones
// column, Rt = R^T):
//   dB_c = V'_c R'^T + (M_C^T o (V'_c G_c^T)) A_c,   dV_c = B_c R + (M_C^T o (B_c A_c^T)) G_c.
void causal_backward_db_dv(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                           const Buffers& w, RowRange rows, ScanState start) {
  const int64_t C = geo.chunk;
  float* R = w.s;
  float* Rt = w.st;
  float* re = w.z;
  start_state(geo, start, R, re, Rt);
  const int64_t first = rows.begin / C, last = (rows.end + C - 1) / C - 1;
  for (int64_t c = last; c >= first; --c) {
    const int64_t r0 = c * C, r = std::min(C, rows.end - r0), rp = padded(r);
    if (c > first) prefetch_next_chunk(geo, r0 - C, {slice.a, slice.b, slice.db}, {slice.v, slice.out, slice.dout, slice.dv});
    load_features(geo, cfg.feature_map, slice.a, nullptr, r0, r, w.a);
    load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
    load_g(geo, slice, cfg.eps, r0, r, w.gu, w.ge);
    if (slice.db) {
      simd::transpose(slice.v + r0 * geo.e, r, geo.e, geo.e, w.vt, geo.cp, rp);
      masked_g_vt(geo, w, r, rp);
      gemm(r, geo.dp, geo.e, rows_of(slice.v + r0 * geo.e, geo.e), Rt, geo.dp, w.tile_d, geo.dp, false);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < geo.dp; ++k) w.tile_d[i * geo.dp + k] += re[k];
      gemm(r, geo.dp, r, transpose_of(w.dd, geo.cp), w.a, geo.dp, w.tile_d, geo.dp, true, Tri::upper_k);
      write_key_grad(geo, cfg.feature_map, slice, r0, r, w.tile_d);
    }
    if (slice.dv) {
      simd::transpose(w.b, r, geo.d, geo.dp, w.bt, geo.cp, rp);
      gemm(r, rp, geo.d, rows_of(w.a, geo.dp), w.bt, geo.cp, w.p, geo.cp, false, Tri::lower_out);
      simd::mask_strict_upper(w.p, r, rp, geo.cp);
      float* dv = values_target(geo, slice.dv, r0, w.tile_e);
      const int64_t lddv = geo.e == geo.ep ? geo.e : geo.ep;
      gemm(r, geo.ep, geo.d, rows_of(w.b, geo.dp), R, geo.ep, dv, lddv, false);
      gemm(r, geo.ep, r, transpose_of(w.p, geo.cp), w.gu, geo.ep, dv, lddv, true, Tri::upper_k);
      if (dv == w.tile_e) simd::copy_padded(w.tile_e, r, geo.e, geo.ep, slice.dv + r0 * geo.e, geo.e, geo.e);
    }
    if (c > first) {  // fold this chunk into R' for the chunks before it
      gemm(geo.d, geo.ep, r, transpose_of(w.a, geo.dp), w.gu, geo.ep, R, geo.ep, true);
      if (slice.db) simd::transpose(R, geo.d, geo.e, geo.ep, Rt, geo.dp, geo.dp);
      add_weighted_rows(geo, w.a, w.ge, r, re);
    }
  }
}

}  // namespace tarn::kernels::cpu::linear_attention_detail
