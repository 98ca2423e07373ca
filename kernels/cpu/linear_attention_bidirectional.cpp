// Bidirectional and cross attention (Nq != Nk) of docs/design.md section 2: S' = B^T V' once,
// then U = A S'; backward through S' and R' = A^T G.
#include <algorithm>

#include "kernels/cpu/linear_attention_internal.h"

namespace tarn::kernels::cpu::linear_attention_detail {

using simd::gemm;
using simd::rows_of;
using simd::transpose_of;

// S' = B^T V' over all keys, then U = A S' per query chunk.
void bidirectional_forward_slice(const Geometry& geo, const LinearAttentionConfig& cfg,
                                 const Slice& slice, const Buffers& w) {
  const int64_t C = geo.chunk;
  std::fill(w.s, w.s + geo.dp * geo.ep, 0.0f);
  std::fill(w.z, w.z + geo.dp, 0.0f);
  for (int64_t r0 = 0; r0 < geo.n_k; r0 += C) {
    const int64_t r = std::min(C, geo.n_k - r0);
    load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
    const float* v = values_operand(geo, slice.v, r0, r, w.v);
    gemm(geo.d, geo.ep, r, transpose_of(w.b, geo.dp), v, geo.ep == geo.e ? geo.e : geo.ep, w.s, geo.ep, true);
    add_column_sums(geo, w.b, r, w.z);
  }
  for (int64_t r0 = 0; r0 < geo.n_q; r0 += C) {
    const int64_t r = std::min(C, geo.n_q - r0);
    float* den = slice.den_w + r0;
    load_features(geo, cfg.feature_map, slice.a, nullptr, r0, r, w.a);
    float* u = values_target(geo, slice.out_w, r0, w.tile_e);
    const int64_t ldu = geo.e == geo.ep ? geo.e : geo.ep;
    gemm(r, geo.ep, geo.d, rows_of(w.a, geo.dp), w.s, geo.ep, u, ldu, false);
    for (int64_t i = 0; i < r; ++i) den[i] = simd::dot(w.a + i * geo.dp, w.z, geo.dp);
    write_output(geo, u, ldu, den, cfg.eps, r, slice.out_w + r0 * geo.e);
  }
}

// dA = G S'^T (St = S^T, z); R' = A^T G (R, Rt = R^T, re); dB = V' R'^T; dV = B R.
void bidirectional_backward_slice(const Geometry& geo, const LinearAttentionConfig& cfg,
                                  const Slice& slice, const Buffers& w) {
  const int64_t C = geo.chunk;
  float* St = w.st;
  float* R = w.s;
  float* Rt = w.s2;
  float* z = w.z;
  float* re = w.z2;
  if (slice.da) {
    std::fill(St, St + geo.ep * geo.dp, 0.0f);
    std::fill(z, z + geo.dp, 0.0f);
    for (int64_t r0 = 0; r0 < geo.n_k; r0 += C) {
      const int64_t r = std::min(C, geo.n_k - r0);
      load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
      gemm(geo.e, geo.dp, r, transpose_of(slice.v + r0 * geo.e, geo.e), w.b, geo.dp, St, geo.dp, true);
      add_column_sums(geo, w.b, r, z);
    }
  }
  const bool key_grads = slice.db || slice.dv;
  if (key_grads) {
    std::fill(R, R + geo.dp * geo.ep, 0.0f);
    std::fill(re, re + geo.dp, 0.0f);
  }
  for (int64_t r0 = 0; r0 < geo.n_q; r0 += C) {
    const int64_t r = std::min(C, geo.n_q - r0);
    load_g(geo, slice, cfg.eps, r0, r, w.gu, w.ge);
    if (key_grads) {
      load_features(geo, cfg.feature_map, slice.a, nullptr, r0, r, w.a);
      gemm(geo.d, geo.ep, r, transpose_of(w.a, geo.dp), w.gu, geo.ep, R, geo.ep, true);
      add_weighted_rows(geo, w.a, w.ge, r, re);
    }
    if (slice.da) {
      gemm(r, geo.dp, geo.e, rows_of(w.gu, geo.ep), St, geo.dp, w.tile_d, geo.dp, false);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < geo.dp; ++k) w.tile_d[i * geo.dp + k] += w.ge[i] * z[k];
      feature_map_rows_backward(cfg.feature_map, r, geo.d, slice.a + r0 * geo.d, geo.d, w.tile_d, geo.dp,
                                slice.da + r0 * geo.d, geo.d);
    }
  }
  if (!key_grads) return;
  if (slice.db) simd::transpose(R, geo.d, geo.e, geo.ep, Rt, geo.dp, geo.dp);
  for (int64_t r0 = 0; r0 < geo.n_k; r0 += C) {
    const int64_t r = std::min(C, geo.n_k - r0);
    if (slice.db) {
      gemm(r, geo.dp, geo.e, rows_of(slice.v + r0 * geo.e, geo.e), Rt, geo.dp, w.tile_d, geo.dp, false);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < geo.dp; ++k) w.tile_d[i * geo.dp + k] += re[k];
      write_key_grad(geo, cfg.feature_map, slice, r0, r, w.tile_d);
    }
    if (slice.dv) {
      load_features(geo, cfg.feature_map, slice.b, slice.pad, r0, r, w.b);
      float* dv = values_target(geo, slice.dv, r0, w.tile_e);
      gemm(r, geo.ep, geo.d, rows_of(w.b, geo.dp), R, geo.ep, dv, geo.e == geo.ep ? geo.e : geo.ep, false);
      if (dv == w.tile_e) simd::copy_padded(w.tile_e, r, geo.e, geo.ep, slice.dv + r0 * geo.e, geo.e, geo.e);
    }
  }
}

}  // namespace tarn::kernels::cpu::linear_attention_detail
