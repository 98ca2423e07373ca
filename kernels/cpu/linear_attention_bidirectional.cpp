// Bidirectional and cross attention (Nq != Nk) of docs/design.md section 2: S' = B^T V' once,
// then U = A S'; backward through S' and R' = A^T G.
#include <algorithm>

#include "kernels/cpu/linear_attention_internal.h"

namespace tarn::kernels::cpu::linear_attention_detail {

using simd::gemm;
using simd::rows_of;
using simd::transpose_of;

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

}  // namespace tarn::kernels::cpu::linear_attention_detail
