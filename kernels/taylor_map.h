#pragma once
// The Taylor feature map of linear attention (Based, Arora et al. 2024, taken to any order P):
// for a row p of r values and u = p / r^(1/4), phi(p) holds one feature per multiset alpha of at
// most P indices in [0, r), in the order the rows below enumerate them:
//
//   phi(p)_alpha = u^alpha / sqrt(alpha!)        (u^alpha = prod_i u_i^alpha_i, alpha! = prod_i alpha_i!)
//
// so that, by the multinomial theorem, for x = p . p' / sqrt(r)
//
//   phi(p) . phi(p') = sum_{n <= P} x^n / n!,     exp(x)'s Taylor series to order P,
//
// with C(r + P, P) features (r = 16: 153 at P = 2, 4,845 at P = 4; r = 8, P = 4: 495). An even
// order keeps the kernel positive (the series of exp to an even order has no real root), which
// linear attention's normaliser needs. Features are ordered by degree n = 0 .. P, and within a
// degree by the index tuples i_1 <= ... <= i_n in lexicographic order: 1, u_0, .., u_{r-1},
// u_0 u_0 / sqrt(2), u_0 u_1, ...
//
// Forward phi (rows, F) from p (rows, r); backward dp (rows, r) from d_phi (rows, F), each row
// summed in a fixed order whatever the thread count (OpenMP over rows).
#include <cmath>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/host_device.h"

namespace tarn::kernels::cpu {

constexpr int kMaxTaylorOrder = 4;
// Features the CUDA kernels tabulate in shared memory (8 bytes each): r = 16 at order 4 fits.
constexpr int64_t kMaxTaylorFeatures = 5120;

struct TaylorMapDims {
  int64_t rows = 0;
  int64_t r = 0;   // input width, 1 .. 255
  int order = 2;   // P, 1 .. kMaxTaylorOrder
};

// C(n + k, k) for small k: the nondecreasing k-tuples of indices in [0, n + 1).
TARN_HOST_DEVICE int64_t taylor_multisets(int64_t n, int k) {
  int64_t c = 1;
  for (int j = 1; j <= k; ++j) c = c * (n + j) / j;  // exact: a product of j consecutive integers
  return c;
}

// Features of degree n (nondecreasing n-tuples over r indices), and in all up to `order`.
TARN_HOST_DEVICE int64_t taylor_degree_features(int64_t r, int n) { return taylor_multisets(r - 1, n); }
TARN_HOST_DEVICE int64_t taylor_feature_count(int64_t r, int order) { return taylor_multisets(r, order); }

// Feature f's index tuple, packed a byte per index (index j in bits 8j..8j+7; `degree` of them),
// and its coefficient 1 / sqrt(alpha!), by unranking f in the order above.
struct TaylorFeature {
  uint32_t packed;
  int degree;
  float coef;
};
TARN_HOST_DEVICE TaylorFeature taylor_feature(int64_t r, int64_t f) {
  TaylorFeature out{0u, 0, 1.0f};
  int n = 0;
  while (f >= taylor_degree_features(r, n)) f -= taylor_degree_features(r, n++);
  out.degree = n;
  int64_t lo = 0, run = 0;   // the smallest index left; how often the last index repeats
  int64_t last = -1, alpha_factorial = 1;
  for (int j = 0; j < n; ++j) {
    // Tuples for positions j.. that start with v: the (n - j - 1)-tuples over [v, r).
    int64_t v = lo;
    for (;; ++v) {
      const int64_t count = taylor_multisets(r - 1 - v, n - j - 1);
      if (f < count) break;
      f -= count;
    }
    run = v == last ? run + 1 : 1;
    alpha_factorial *= run;
    last = v, lo = v;
    out.packed |= static_cast<uint32_t>(v) << (8 * j);
  }
  out.coef = 1.0f / static_cast<float>(::sqrt(static_cast<double>(alpha_factorial)));
  return out;
}

TARN_HOST_DEVICE int taylor_index(uint32_t packed, int j) { return static_cast<int>((packed >> (8 * j)) & 0xffu); }

// The scale of u = p * taylor_input_scale(r) = p / r^(1/4).
TARN_HOST_DEVICE float taylor_input_scale(int64_t r) {
  return static_cast<float>(1.0 / ::sqrt(::sqrt(static_cast<double>(r))));
}

// Throws tarn::Error for dims either backend refuses (the entry points below call it).
inline void check_taylor_map_dims(const TaylorMapDims& d) {
  TARN_CHECK(d.rows >= 0 && d.r >= 1 && d.r <= 255 && d.order >= 1 && d.order <= kMaxTaylorOrder,
             "taylor map: bad dims rows ", d.rows, " r ", d.r, " order ", d.order, " (r 1..255, order 1..",
             kMaxTaylorOrder, ")");
}

void taylor_map_forward(const TaylorMapDims& dims, const float* p, float* phi);
void taylor_map_backward(const TaylorMapDims& dims, const float* p, const float* d_phi, float* dp);

}  // namespace tarn::kernels::cpu
