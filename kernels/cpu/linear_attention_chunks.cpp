// Chunk loaders and small helpers of the CPU linear-attention scans: rows of q/k through the
// fused feature map into padded tiles, the gradient G of docs/design.md section 2, the ones
// column's vectors, and the write-out of outputs and key gradients.
#include <algorithm>

#include "kernels/cpu/linear_attention_internal.h"

namespace tarn::kernels::cpu::linear_attention_detail {

using simd::gemm;
using simd::rows_of;
using simd::Tri;

// Rows [r0, r0 + r) of q or k through the fused feature map into a padded tile (ld dp);
// padded keys become zero rows, so they add nothing to any product or state.
void load_features(const Geometry& geo, FeatureMap phi, const float* src, const float* pad,
                   int64_t r0, int64_t r, float* dst) {
  feature_map_rows_forward(phi, r, geo.d, src + r0 * geo.d, geo.d, dst, geo.dp);
  for (int64_t i = 0; i < r; ++i) {
    float* row = dst + i * geo.dp;
    const bool masked = pad && pad[r0 + i] != 0.0f;
    std::fill(row + (masked ? 0 : geo.d), row + geo.dp, 0.0f);
  }
}

void load_values(const Geometry& geo, const float* v, int64_t r0, int64_t r, float* dst) {
  simd::copy_padded(v + r0 * geo.e, r, geo.e, geo.e, dst, geo.ep, geo.ep);
}

// G = [dO / (den + eps) | -(dO . out) / (den + eps)] (docs/design.md section 2): the gradient
// with respect to U = [num | den]. The last column goes to ge.
void load_g(const Geometry& geo, const Slice& slice, float eps, int64_t r0, int64_t r, float* gt,
            float* ge) {
  for (int64_t i = 0; i < r; ++i) {
    const float* dor = slice.dout + (r0 + i) * geo.e;
    const float* outr = slice.out + (r0 + i) * geo.e;
    const float inv = 1.0f / (slice.den[r0 + i] + eps);
    float* row = gt + i * geo.ep;
    for (int64_t k = 0; k < geo.e; ++k) row[k] = dor[k] * inv;
    std::fill(row + geo.e, row + geo.ep, 0.0f);
    ge[i] = -simd::dot(dor, outr, geo.e) * inv;
  }
}

// z += sum of the r rows of x (ld dp): the ones column's share of a state update.
void add_column_sums(const Geometry& geo, const float* x, int64_t r, float* z) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < geo.dp; ++k) z[k] += x[i * geo.dp + k];
}

// z += sum_i w_i x_i (rows of x, ld dp).
void add_weighted_rows(const Geometry& geo, const float* x, const float* w, int64_t r, float* z) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < geo.dp; ++k) z[k] += w[i] * x[i * geo.dp + k];
}

// out rows = u / (den + eps), first e columns of u (ld ldu; u may be out itself).
void write_output(const Geometry& geo, const float* u, int64_t ldu, const float* den, float eps,
                  int64_t r, float* out) {
  for (int64_t i = 0; i < r; ++i) {
    const float inv = 1.0f / (den[i] + eps);
    for (int64_t k = 0; k < geo.e; ++k) out[i * geo.e + k] = u[i * ldu + k] * inv;
  }
}

// Rows [r0, r0 + r) of v as a GEMM right operand (width a multiple of the SIMD width): the
// input itself when e is such a multiple, else a zero-padded copy in `tile`.
const float* values_operand(const Geometry& geo, const float* v, int64_t r0, int64_t r, float* tile) {
  if (geo.e == geo.ep) return v + r0 * geo.e;
  load_values(geo, v, r0, r, tile);
  return tile;
}

// Where a GEMM producing e-wide output rows [r0, r0 + r) should write: straight into the
// output tensor when its rows are a SIMD multiple wide, else into `tile` (ld ep).
float* values_target(const Geometry& geo, float* out, int64_t r0, float* tile) {
  return geo.e == geo.ep ? out + r0 * geo.e : tile;
}

// dK rows: chain the tile (ld dp) through phi' and zero the padded keys (constant zero rows).
void write_key_grad(const Geometry& geo, FeatureMap phi, const Slice& slice, int64_t r0, int64_t r,
                    const float* tile) {
  float* dst = slice.db + r0 * geo.d;
  feature_map_rows_backward(phi, r, geo.d, slice.b + r0 * geo.d, geo.d, tile, geo.dp, dst, geo.d);
  if (slice.pad)
    for (int64_t i = 0; i < r; ++i)
      if (slice.pad[r0 + i] != 0.0f) std::fill(dst + i * geo.d, dst + (i + 1) * geo.d, 0.0f);
}

// D = M_C o (g v'^T) = M_C o (g vt + ge 1^T) for an r-row chunk (rp = padded r).
void masked_g_vt(const Geometry& geo, const Buffers& w, int64_t r, int64_t rp) {
  gemm(r, rp, geo.e, rows_of(w.gu, geo.ep), w.vt, geo.cp, w.dd, geo.cp, false, Tri::lower_out);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j <= i; ++j) w.dd[i * geo.cp + j] += w.ge[i];
  simd::mask_strict_upper(w.dd, r, rp, geo.cp);
}

}  // namespace tarn::kernels::cpu::linear_attention_detail
