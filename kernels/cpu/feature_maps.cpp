// Feature maps for linear attention on the CPU (definitions in kernels/feature_maps.h,
// docs/design.md section 2).
#include "kernels/feature_maps.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/linear_attention_simd.h"

namespace tarn::kernels::cpu {

using simd::kLanes;
using simd::load;
using simd::splat;
using simd::store;
using simd::Vec;

namespace {

constexpr int64_t kRowsPerTask = 64;  // rows per parallel task / per favor GEMM tile
// Below this many output floats a parallel region costs more than it saves.
constexpr int64_t kParallelMinFloats = 1 << 14;

// The index of the first largest entry (the element a max-stabiliser differentiates to).
int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t k = 1; k < n; ++k)
    if (x[k] > x[best]) best = k;
  return best;
}

float max_of(const float* x, int64_t n) {
  float m = -__builtin_inff();
  for (int64_t k = 0; k < n; ++k) m = std::max(m, x[k]);
  return m;
}

void elu1_row(const float* x, float* y, int64_t d) {
  int64_t k = 0;
  for (; k + kLanes <= d; k += kLanes) {
    const Vec v = load(x + k);
    const Vec neg = simd::exp(v < 0.0f ? v : Vec{});
    store(y + k, v > 0.0f ? v + 1.0f : neg);
  }
  for (; k < d; ++k) y[k] = x[k] > 0.0f ? x[k] + 1.0f : simd::exp(x[k]);
}

void elu1_row_backward(const float* x, const float* dy, float* dx, int64_t d) {
  int64_t k = 0;
  for (; k + kLanes <= d; k += kLanes) {
    const Vec v = load(x + k);
    const Vec slope = simd::exp(v < 0.0f ? v : Vec{});
    store(dx + k, load(dy + k) * (v > 0.0f ? splat(1.0f) : slope));
  }
  for (; k < d; ++k) dx[k] = dy[k] * (x[k] > 0.0f ? 1.0f : simd::exp(x[k]));
}

// exp(x - max x): dx_k = y_k dy_k - [k = argmax] sum_i y_i dy_i (the max moves with x).
void exp_row_backward(const float* x, const float* dy, float* dx, int64_t d) {
  const int64_t top = argmax(x, d);
  const float shift = x[top];
  float dot = 0.0f;
  for (int64_t k = 0; k < d; ++k) dot += simd::exp(x[k] - shift) * dy[k];
  for (int64_t k = 0; k < d; ++k) dx[k] = simd::exp(x[k] - shift) * dy[k];
  dx[top] -= dot;
}

}  // namespace

void feature_map_rows_forward(FeatureMap kind, int64_t rows, int64_t d, const float* x,
                              int64_t ldx, float* y, int64_t ldy) {
  TARN_ASSERT(feature_map_is_row_local(kind), "feature_map_rows_forward: ",
              feature_map_name(kind), " is not row-local");
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    switch (kind) {
      case FeatureMap::elu1: elu1_row(xi, yi, d); break;
      case FeatureMap::relu:
        for (int64_t k = 0; k < d; ++k) yi[k] = std::max(xi[k], 0.0f);
        break;
      case FeatureMap::exp: simd::exp_shifted(xi, max_of(xi, d), yi, d); break;
      case FeatureMap::identity: std::memmove(yi, xi, sizeof(float) * d); break;
      case FeatureMap::favor:
      case FeatureMap::taylor:
      case FeatureMap::hedgehog: break;
    }
  }
}

void feature_map_rows_backward(FeatureMap kind, int64_t rows, int64_t d, const float* x,
                               int64_t ldx, const float* dy, int64_t lddy, float* dx,
                               int64_t lddx) {
  TARN_ASSERT(feature_map_is_row_local(kind), "feature_map_rows_backward: ",
              feature_map_name(kind), " is not row-local");
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    const float* dyi = dy + i * lddy;
    float* dxi = dx + i * lddx;
    switch (kind) {
      case FeatureMap::elu1: elu1_row_backward(xi, dyi, dxi, d); break;
      case FeatureMap::relu:
        for (int64_t k = 0; k < d; ++k) dxi[k] = xi[k] > 0.0f ? dyi[k] : 0.0f;
        break;
      case FeatureMap::exp: exp_row_backward(xi, dyi, dxi, d); break;
      case FeatureMap::identity: std::memmove(dxi, dyi, sizeof(float) * d); break;
      case FeatureMap::favor:
      case FeatureMap::taylor:
      case FeatureMap::hedgehog: break;
    }
  }
}

void feature_map_forward(FeatureMap kind, int64_t rows, int64_t d, const float* x, float* y) {
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static) if (rows * d >= kParallelMinFloats)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r0 = t * kRowsPerTask, n = std::min(kRowsPerTask, rows - r0);
    feature_map_rows_forward(kind, n, d, x + r0 * d, d, y + r0 * d, d);
  }
}

void feature_map_backward(FeatureMap kind, int64_t rows, int64_t d, const float* x,
                          const float* dy, float* dx) {
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static) if (rows * d >= kParallelMinFloats)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r0 = t * kRowsPerTask, n = std::min(kRowsPerTask, rows - r0);
    feature_map_rows_backward(kind, n, d, x + r0 * d, d, dy + r0 * d, d, dx + r0 * d, d);
  }
}

// ---- FAVOR+ ----

namespace {

float favor_input_scale(int64_t d) { return static_cast<float>(std::pow(double(d), -0.25)); }

void check_favor(const char* op, const FavorDims& g) {
  TARN_ASSERT(g.slices >= 0 && g.rows >= 0 && g.d > 0 && g.m > 0, op,
              ": bad dims (slices ", g.slices, ", rows ", g.rows, ", d ", g.d, ", m ", g.m, ")");
}

}  // namespace

void favor_forward(const FavorDims& g, FavorStabilizer stab, const float* x, const float* w,
                   float* y) {
  check_favor("favor_forward", g);
  const int64_t total = g.slices * g.rows;
  if (total == 0) return;
  const float scale = favor_input_scale(g.d);
  const float half_sq = 0.5f * scale * scale;  // |x'|^2 / 2 = half_sq * |x|^2
  const float inv_sqrt_m = 1.0f / std::sqrt(static_cast<float>(g.m));
  // h = x' W^T for every row at once: one large multi-threaded sgemm, outside any region.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(total),
              static_cast<int>(g.m), static_cast<int>(g.d), scale, x, static_cast<int>(g.d), w,
              static_cast<int>(g.d), 0.0f, y, static_cast<int>(g.m));
  auto subtract_norm = [&](int64_t r) {  // t = h - |x'|^2 / 2
    const float* xr = x + r * g.d;
    float sq = 0.0f;
    for (int64_t k = 0; k < g.d; ++k) sq += xr[k] * xr[k];
    float* yr = y + r * g.m;
    const float c = half_sq * sq;
    for (int64_t j = 0; j < g.m; ++j) yr[j] -= c;
  };
  const bool parallel = total * g.m >= kParallelMinFloats;
  if (stab == FavorStabilizer::per_slice) {
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int64_t s = 0; s < g.slices; ++s) {
      float top = -__builtin_inff();
      for (int64_t r = s * g.rows; r < (s + 1) * g.rows; ++r) {
        subtract_norm(r);
        top = std::max(top, max_of(y + r * g.m, g.m));
      }
      float* ys = y + s * g.rows * g.m;
      simd::exp_shifted(ys, top, ys, g.rows * g.m);
      for (int64_t j = 0; j < g.rows * g.m; ++j) ys[j] *= inv_sqrt_m;
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < total; ++r) {
    subtract_norm(r);
    float* yr = y + r * g.m;
    const float shift = stab == FavorStabilizer::per_row ? max_of(yr, g.m) : 0.0f;
    simd::exp_shifted(yr, shift, yr, g.m);
    for (int64_t j = 0; j < g.m; ++j) yr[j] *= inv_sqrt_m;
  }
}

size_t favor_backward_workspace_floats(const FavorDims& g) {
  // One kRowsPerTask x m tile of dt per thread, plus (argmax, sum) per slice.
  return static_cast<size_t>(omp_get_max_threads()) *
             static_cast<size_t>(simd::padded(kRowsPerTask * g.m)) +
         static_cast<size_t>(simd::padded(3 * g.slices));
}

void favor_backward(const FavorDims& g, FavorStabilizer stab, const float* x, const float* w,
                    const float* y, const float* dy, float* dx, float* workspace,
                    size_t workspace_floats) {
  check_favor("favor_backward", g);
  const int64_t total = g.slices * g.rows;
  if (total == 0) return;
  const int64_t tile_floats = simd::padded(kRowsPerTask * g.m);
  const int64_t slice_floats = simd::padded(3 * g.slices);
  TARN_ASSERT(static_cast<int64_t>(workspace_floats) >= slice_floats + tile_floats,
              "favor_backward: workspace of ", workspace_floats, " floats, need at least ",
              slice_floats + tile_floats);
  const int64_t tasks = (total + kRowsPerTask - 1) / kRowsPerTask;
  const int threads = static_cast<int>(std::min<int64_t>(
      {omp_get_max_threads(), (static_cast<int64_t>(workspace_floats) - slice_floats) / tile_floats,
       total * g.m >= kParallelMinFloats ? tasks : 1}));
  const float scale = favor_input_scale(g.d);
  const int64_t slice_elems = g.rows * g.m;

  // Per slice: the stabiliser's gradient -sum(dy * y) goes to its argmax (first max of y).
  // Stored as (argmax high, argmax low, sum) floats so that indices up to 2^48 survive.
  float* slice_info = workspace;
  const bool parallel = total * g.m >= kParallelMinFloats;
  if (stab == FavorStabilizer::per_slice) {
#pragma omp parallel for schedule(dynamic, 1) if (parallel) num_threads(threads)
    for (int64_t s = 0; s < g.slices; ++s) {
      const float* ys = y + s * slice_elems;
      const float* dys = dy + s * slice_elems;
      const int64_t top = argmax(ys, slice_elems);
      double sum = 0.0;
      for (int64_t j = 0; j < slice_elems; ++j) sum += double(ys[j]) * dys[j];
      slice_info[3 * s] = static_cast<float>(top >> 24);
      slice_info[3 * s + 1] = static_cast<float>(top & 0xFFFFFF);
      slice_info[3 * s + 2] = static_cast<float>(-sum);
    }
  }

#pragma omp parallel num_threads(threads)
  {
    float* dt = workspace + slice_floats + omp_get_thread_num() * tile_floats;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t r0 = t * kRowsPerTask, n = std::min(kRowsPerTask, total - r0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = r0 + i;
        const float* yr = y + r * g.m;
        const float* dyr = dy + r * g.m;
        float* dtr = dt + i * g.m;
        for (int64_t j = 0; j < g.m; ++j) dtr[j] = dyr[j] * yr[j];  // d/dt of exp(t - s)
        if (stab == FavorStabilizer::per_row) {
          float sum = 0.0f;
          for (int64_t j = 0; j < g.m; ++j) sum += dtr[j];
          dtr[argmax(yr, g.m)] -= sum;
        } else if (stab == FavorStabilizer::per_slice) {
          const int64_t s = r / g.rows;
          const int64_t top = (static_cast<int64_t>(slice_info[3 * s]) << 24) +
                              static_cast<int64_t>(slice_info[3 * s + 1]);
          if (top / g.m == r - s * g.rows) dtr[top % g.m] += slice_info[3 * s + 2];
        }
      }
      // dx = scale * (dt W - x' * rowsum(dt)) with x' = scale * x  (t = W x' - |x'|^2 / 2).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                  static_cast<int>(g.d), static_cast<int>(g.m), scale, dt,
                  static_cast<int>(g.m), w, static_cast<int>(g.d), 0.0f, dx + r0 * g.d,
                  static_cast<int>(g.d));
      for (int64_t i = 0; i < n; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < g.m; ++j) sum += dt[i * g.m + j];
        const float c = scale * scale * sum;
        const float* xr = x + (r0 + i) * g.d;
        float* dxr = dx + (r0 + i) * g.d;
        for (int64_t k = 0; k < g.d; ++k) dxr[k] -= c * xr[k];
      }
    }
  }
}

size_t favor_projection_normal_count(int64_t m, int64_t d) {
  const int64_t blocks = (m + d - 1) / d;
  return static_cast<size_t>(blocks * d * d + m * d);
}

void favor_projection_from_normals(int64_t m, int64_t d, const float* normals, float* w) {
  TARN_ASSERT(m > 0 && d > 0, "favor_projection: bad m ", m, " or d ", d);
  const int64_t blocks = (m + d - 1) / d;
  std::vector<double> q(static_cast<size_t>(d * d));
  for (int64_t b = 0; b < blocks; ++b) {
    const float* gb = normals + b * d * d;
    // Modified Gram-Schmidt on the rows: a Haar-random orthonormal basis.
    for (int64_t i = 0; i < d; ++i) {
      double* qi = q.data() + i * d;
      for (int64_t k = 0; k < d; ++k) qi[k] = gb[i * d + k];
      for (int64_t j = 0; j < i; ++j) {
        const double* qj = q.data() + j * d;
        double dot = 0.0;
        for (int64_t k = 0; k < d; ++k) dot += qi[k] * qj[k];
        for (int64_t k = 0; k < d; ++k) qi[k] -= dot * qj[k];
      }
      double norm = 0.0;
      for (int64_t k = 0; k < d; ++k) norm += qi[k] * qi[k];
      norm = std::sqrt(norm);
      TARN_ASSERT(norm > 0.0, "favor_projection: degenerate Gaussian block");
      for (int64_t k = 0; k < d; ++k) qi[k] /= norm;
    }
    const int64_t take = std::min(d, m - b * d);
    for (int64_t i = 0; i < take; ++i) {
      const int64_t row = b * d + i;
      const float* gn = normals + blocks * d * d + row * d;
      double len = 0.0;
      for (int64_t k = 0; k < d; ++k) len += double(gn[k]) * gn[k];
      len = std::sqrt(len);
      for (int64_t k = 0; k < d; ++k) w[row * d + k] = static_cast<float>(q[i * d + k] * len);
    }
  }
}

}  // namespace tarn::kernels::cpu
