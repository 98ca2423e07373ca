// The Taylor feature map on CUDA (kernels/taylor_map.h, kernels/cuda_taylor_map.h). Every block
// first tabulates the features' index tuples and coefficients in shared memory (each thread
// unranks a share of them: taylor_feature), then runs a grid-stride loop: forward a thread per
// (row, feature), backward a thread per (row, input index), which sums over every feature in
// order, so each element is one thread's fixed-order sum: the same bits on every run.
#include "kernels/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_taylor_map.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::kMaxTaylorOrder;
using cpu::TaylorFeature;
using cpu::TaylorMapDims;

// The block's table: packed index tuples, then coefficients, F of each.
struct Table {
  uint32_t* packed;
  float* coef;
  int64_t end[kMaxTaylorOrder + 1];  // end[n]: one past the last feature of degree n
  __device__ int degree(int64_t f) const {
    int n = 0;
    while (f >= end[n]) ++n;
    return n;
  }
};

// Fills the table (every thread its share) and ends past a barrier.
__device__ Table tabulate(const TaylorMapDims& d, int64_t features, unsigned char* smem) {
  Table t;
  t.packed = reinterpret_cast<uint32_t*>(smem);
  t.coef = reinterpret_cast<float*>(smem + features * sizeof(uint32_t));
  int64_t end = 0;
  for (int n = 0; n <= kMaxTaylorOrder; ++n) {
    if (n <= d.order) end += cpu::taylor_degree_features(d.r, n);
    t.end[n] = end;
  }
  for (int64_t f = threadIdx.x; f < features; f += blockDim.x) {
    const TaylorFeature tf = cpu::taylor_feature(d.r, f);
    t.packed[f] = tf.packed;
    t.coef[f] = tf.coef;
  }
  __syncthreads();
  return t;
}

__global__ void taylor_map_forward_kernel(TaylorMapDims d, int64_t features, const float* p, float* phi) {
  TARN_DYNAMIC_SHARED(unsigned char, smem);
  const Table t = tabulate(d, features, smem);
  const float s = cpu::taylor_input_scale(d.r);
  const int64_t total = d.rows * features;
  for (int64_t e = device::global_index(); e < total; e += device::global_stride()) {
    const int64_t row = e / features, f = e % features;
    const float* u = p + row * d.r;
    float x = t.coef[f];
    for (int j = 0, n = t.degree(f); j < n; ++j) x *= u[cpu::taylor_index(t.packed[f], j)] * s;
    phi[e] = x;
  }
}

// dp[row, i] = s sum_f d_phi[row, f] coef_f sum_{j: i_j = i} prod_{l != j} u_{i_l}
__global__ void taylor_map_backward_kernel(TaylorMapDims d, int64_t features, const float* p, const float* d_phi,
                                           float* dp) {
  TARN_DYNAMIC_SHARED(unsigned char, smem);
  const Table t = tabulate(d, features, smem);
  const float s = cpu::taylor_input_scale(d.r);
  const int64_t total = d.rows * d.r;
  for (int64_t e = device::global_index(); e < total; e += device::global_stride()) {
    const int64_t row = e / d.r;
    const int i = static_cast<int>(e % d.r);
    const float* u = p + row * d.r;
    const float* g = d_phi + row * features;
    float du = 0.0f;
    for (int64_t f = 1; f < features; ++f) {  // feature 0 is the constant 1
      const uint32_t packed = t.packed[f];
      const int n = t.degree(f);
      const float gf = g[f] * t.coef[f];
      for (int j = 0; j < n; ++j) {
        if (cpu::taylor_index(packed, j) != i) continue;
        float x = gf;
        for (int l = 0; l < n; ++l)
          if (l != j) x *= u[cpu::taylor_index(packed, l)] * s;
        du += x;
      }
    }
    dp[e] = du * s;
  }
}

int64_t checked_features(const TaylorMapDims& d) {
  cpu::check_taylor_map_dims(d);
  const int64_t features = cpu::taylor_feature_count(d.r, d.order);
  TARN_CHECK(features <= cpu::kMaxTaylorFeatures, "taylor map on CUDA: ", features, " features (r ", d.r, ", order ",
             d.order, ") exceed the ", cpu::kMaxTaylorFeatures, " its kernels tabulate");
  return features;
}

size_t table_bytes(int64_t features) { return static_cast<size_t>(features) * (sizeof(uint32_t) + sizeof(float)); }

}  // namespace

void taylor_map_forward(const TaylorMapDims& d, const float* p, float* phi) {
  const int64_t features = checked_features(d);
  if (d.rows == 0) return;
  tarn::launch(taylor_map_forward_kernel, device::grid_for(d.rows * features), device::kBlock, table_bytes(features),
               nullptr, d, features, p, phi);
}

void taylor_map_backward(const TaylorMapDims& d, const float* p, const float* d_phi, float* dp) {
  const int64_t features = checked_features(d);
  if (d.rows == 0) return;
  tarn::launch(taylor_map_backward_kernel, device::grid_for(d.rows * d.r), device::kBlock, table_bytes(features),
               nullptr, d, features, p, d_phi, dp);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
