// The FAVOR+ feature map of kernels/feature_maps.h on CUDA (the "favor through the projection
// GEMM then a fused exp" of docs/design.md section 2): the projection h = x' W^T of all rows is one
// gemm_batched (cuBLAS; the emulated build calls the CPU's sgemm), and one row-wise pass then
// subtracts |x'|^2 / 2 and the stabiliser and takes exp, in place. Backward likewise: a
// row-wise pass forms dt = dy o y with the stabiliser's gradient, one GEMM gives dt W, and a
// row-wise pass subtracts x' rowsum(dt). The attention kernels then take y as features
// (feature_map identity), as the framework does on the CPU (framework/ops/attention.cpp):
// favor cannot be fused into their loads, since every feature needs the whole projected row.
//
// Stabilisers, exactly as the CPU: per_row subtracts each row's max (one warp per row finds
// it), per_slice the max over a whole (batch, head) slice (one block per slice), none nothing.
// The max is differentiated through: its gradient goes to the FIRST argmax (row-major order
// within the row or slice), which the reductions keep by breaking ties towards the lower index.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/feature_maps.cuh"
#include "kernels/cuda_kernels.h"

#include <cmath>

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::FavorDims;
using cpu::FavorStabilizer;

// A (max, first index) pair over a slice (indices past 2^31).
using SliceTop = fmap::MaxAt<int64_t>;
using fmap::combine;

// The block's largest value and its first index; every thread gets it. The leading barrier
// lets a call follow another use of the shared arrays.
__device__ SliceTop block_argmax(SliceTop v) {
  __shared__ float values[device::kWarp];
  __shared__ int64_t indices[device::kWarp];
  const int lane = threadIdx.x % device::kWarp, warp = threadIdx.x / device::kWarp;
  const int warps = blockDim.x / device::kWarp;
  for (int m = device::kWarp / 2; m > 0; m /= 2) {
    const SliceTop other{__shfl_xor_sync(device::kFullMask, v.value, m),
                         __shfl_xor_sync(device::kFullMask, v.index, m)};
    v = combine(v, other);
  }
  __syncthreads();
  if (lane == 0) {
    values[warp] = v.value;
    indices[warp] = v.index;
  }
  __syncthreads();
  SliceTop r{values[0], indices[0]};
  for (int w = 1; w < warps; ++w) r = combine(r, SliceTop{values[w], indices[w]});
  return r;
}

// Forward, one warp per row of y (rows, m) = h: t = h - half_sq |x|^2; unless per_slice (whose
// exp waits for the slice max), y = exp(t - s) / sqrt(m) with s = max_j t_j (per_row) or 0.
__global__ void favor_rows_forward_kernel(const float* x, float* y, int64_t rows, int d, int m, float half_sq,
                                          float inv_sqrt_m, FavorStabilizer stab) {
  const int lane = threadIdx.x % device::kWarp;
  device::for_each_row_of_warp(rows, [&](int64_t r) {
    const float* xr = x + r * d;
    float* yr = y + r * m;
    float sq = 0.0f;
    for (int k = lane; k < d; k += device::kWarp) sq += xr[k] * xr[k];
    const float c = half_sq * device::warp_reduce(sq, device::Sum());
    float top = -INFINITY;
    for (int j = lane; j < m; j += device::kWarp) {
      const float t = yr[j] - c;
      yr[j] = t;
      top = fmaxf(top, t);
    }
    if (stab == FavorStabilizer::per_slice) return;
    const float shift = stab == FavorStabilizer::per_row ? device::warp_reduce(top, device::Max()) : 0.0f;
    for (int j = lane; j < m; j += device::kWarp) yr[j] = expf(yr[j] - shift) * inv_sqrt_m;
  });
}

// per_slice forward, one block per slice of n = rows * m values of t: y = exp(t - max) / sqrt(m).
__global__ void favor_slice_exp_kernel(float* y, int64_t slices, int64_t n, float inv_sqrt_m) {
  for (int64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    float* ys = y + s * n;
    float top = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) top = fmaxf(top, ys[j]);
    top = device::block_max(top);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) ys[j] = expf(ys[j] - top) * inv_sqrt_m;
  }
}

// Backward, one warp per row: dt = dy o y (the derivative of exp(t - s) in t), and for per_row
// the shift's gradient -sum_j dt_j at the row's first argmax of y.
__global__ void favor_rows_dt_kernel(const float* y, const float* dy, float* dt, int64_t rows, int m,
                                     FavorStabilizer stab) {
  const int lane = threadIdx.x % device::kWarp;
  device::for_each_row_of_warp(rows, [&](int64_t r) {
    const float* yr = y + r * m;
    const float* dyr = dy + r * m;
    float* dtr = dt + r * m;
    float sum = 0.0f;
    for (int j = lane; j < m; j += device::kWarp) {
      const float v = dyr[j] * yr[j];
      dtr[j] = v;
      sum += v;
    }
    if (stab != FavorStabilizer::per_row) return;
    sum = device::warp_reduce(sum, device::Sum());
    const fmap::ArgMax top = fmap::warp_argmax(yr, m);
    if (lane == top.index % device::kWarp) dtr[top.index] -= sum;  // the lane that wrote it
  });
}

// per_slice backward, one block per slice of n values: the shift's gradient -sum(dt) goes to
// the slice's first argmax of y.
__global__ void favor_slice_dt_kernel(const float* y, float* dt, int64_t slices, int64_t n) {
  for (int64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    const float* ys = y + s * n;
    float* dts = dt + s * n;
    SliceTop top{-INFINITY, n};
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      top = combine(top, SliceTop{ys[j], j});
      sum += dts[j];
    }
    top = block_argmax(top);
    sum = device::block_sum(sum);  // its barriers also order every read of dts before the write
    if (threadIdx.x == 0) dts[top.index < n ? top.index : 0] -= sum;
    __syncthreads();  // the next slice's block_argmax reuses shared arrays after thread 0's read
  }
}

// dx (rows, d) -= scale^2 * rowsum(dt) * x, one warp per row (dx = scale dt W already).
__global__ void favor_rows_dx_kernel(const float* x, const float* dt, float* dx, int64_t rows, int d, int m,
                                     float scale_sq) {
  const int lane = threadIdx.x % device::kWarp;
  device::for_each_row_of_warp(rows, [&](int64_t r) {
    const float* dtr = dt + r * m;
    float sum = 0.0f;
    for (int j = lane; j < m; j += device::kWarp) sum += dtr[j];
    const float c = scale_sq * device::warp_reduce(sum, device::Sum());
    const float* xr = x + r * d;
    float* dxr = dx + r * d;
    for (int k = lane; k < d; k += device::kWarp) dxr[k] -= c * xr[k];
  });
}

void check_favor(const char* op, const FavorDims& g) {
  TARN_ASSERT(g.slices >= 0 && g.rows >= 0 && g.d > 0 && g.m > 0, op, ": bad dims (slices ", g.slices, ", rows ",
              g.rows, ", d ", g.d, ", m ", g.m, ")");
  TARN_ASSERT(g.d <= INT32_MAX && g.m <= INT32_MAX, op, ": d ", g.d, " or m ", g.m, " too large");
}

// d^(-1/4), the input scaling x' = d^(-1/4) x (as the CPU computes it).
float favor_input_scale(int64_t d) { return static_cast<float>(std::pow(double(d), -0.25)); }

unsigned slice_blocks(int64_t slices) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(slices, device::kMaxGridBlocks)));
}

}  // namespace

void favor_forward(const FavorDims& g, FavorStabilizer stab, const float* x, const float* w, float* y) {
  check_favor("favor_forward", g);
  const int64_t total = g.slices * g.rows;
  if (total == 0) return;
  const float scale = favor_input_scale(g.d);
  const float inv_sqrt_m = 1.0f / std::sqrt(static_cast<float>(g.m));
  gemm_batched(false, true, 1, total, g.m, g.d, scale, x, 0, w, 0, 0.0f, y, 0);
  tarn::launch(favor_rows_forward_kernel, device::grid_for(total * device::kWarp), device::kBlock, 0, nullptr, x, y,
               total, static_cast<int>(g.d), static_cast<int>(g.m), 0.5f * scale * scale, inv_sqrt_m, stab);
  if (stab == FavorStabilizer::per_slice)
    tarn::launch(favor_slice_exp_kernel, slice_blocks(g.slices), device::kBlock, 0, nullptr, y, g.slices,
                 g.rows * g.m, inv_sqrt_m);
}

size_t favor_backward_workspace_floats(const FavorDims& g) {
  check_favor("favor_backward", g);
  return static_cast<size_t>(g.slices * g.rows * g.m);  // dt
}

void favor_backward(const FavorDims& g, FavorStabilizer stab, const float* x, const float* w, const float* y,
                    const float* dy, float* dx, float* workspace, size_t workspace_floats) {
  check_favor("favor_backward", g);
  const int64_t total = g.slices * g.rows;
  if (total == 0) return;
  const size_t need = TARN_CUDA_NS::favor_backward_workspace_floats(g);
  TARN_ASSERT(workspace && workspace_floats >= need, "favor_backward: workspace of ", workspace_floats,
              " floats, need ", need);
  const float scale = favor_input_scale(g.d);
  const int d = static_cast<int>(g.d), m = static_cast<int>(g.m);
  float* dt = workspace;
  tarn::launch(favor_rows_dt_kernel, device::grid_for(total * device::kWarp), device::kBlock, 0, nullptr, y, dy, dt,
               total, m, stab);
  if (stab == FavorStabilizer::per_slice)
    tarn::launch(favor_slice_dt_kernel, slice_blocks(g.slices), device::kBlock, 0, nullptr, y, dt, g.slices,
                 g.rows * g.m);
  // dx = scale * (dt W - x' rowsum(dt)) with x' = scale * x  (t = W x' - |x'|^2 / 2).
  gemm_batched(false, false, 1, total, g.d, g.m, scale, dt, 0, w, 0, 0.0f, dx, 0);
  tarn::launch(favor_rows_dx_kernel, device::grid_for(total * device::kWarp), device::kBlock, 0, nullptr, x,
               static_cast<const float*>(dt), dx, total, d, m, scale * scale);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
