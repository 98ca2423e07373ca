#pragma once
// What the f32 (linear_attention.cu) and bf16 (linear_attention_bf16.cu) linear-attention
// kernels share: the argument checks, the normaliser and G kernels (templated on the element
// type of out / dout), and the sequence split across blocks (docs/design.md section 2; the top of
// linear_attention.cu describes its three passes): how many segments a call uses and pass 2,
// which turns the segments' state sums into the state each segment starts from.
//
// Everything here sits in an anonymous namespace: each including file gets its own copy of the
// kernels, as if it had written them, but there is one source to read and fix.
#include <algorithm>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/linear_attention.h"

namespace tarn::kernels::TARN_CUDA_NS {

// The segment count forced by linear_attention_set_sequence_split (0: automatic), one setting
// for the f32 and bf16 kernels (defined in linear_attention.cu).
int linear_attention_forced_segments();

namespace {

// Which rows of Y a row of X sees: those up to it (the forward scan of causal attention), those
// from it on (the reverse scan of its backward), or all (bidirectional).
enum class ScanMode : int { forward, reverse, full };
enum class ScanPhase : int {
  scan,           // the scan (or bidirectional emit), from zero or from its segment's state
  segment_state,  // pass 1: each segment's Y^T W into the segment states
};

// Automatic splitting: aim for this many blocks per SM, and no more than this many segments.
constexpr int64_t kTargetBlocksPerSm = 2;
constexpr int64_t kMaxSegments = 64;

// Element conversions of the templated kernels below (f32 or bf16 storage, f32 arithmetic).
__device__ __forceinline__ float element_to_float(float x) { return x; }
__device__ __forceinline__ float element_to_float(mma::bf16 x) { return mma::to_float(x); }
template <typename T>
__device__ __forceinline__ T element_from_float(float x);
template <>
__device__ __forceinline__ float element_from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ mma::bf16 element_from_float<mma::bf16>(float x) {
  return mma::to_bf16(x);
}

// The chunks [first, last) of segment z of `segments` over a rows-long sequence of chunk-row
// chunks: the chunks dealt in equal runs, the last segments possibly shorter or empty.
__device__ __forceinline__ void segment_chunks(int64_t rows, int chunk, int z, int segments, int64_t& first,
                                               int64_t& last) {
  const int64_t chunks = (rows + chunk - 1) / chunk;
  const int64_t per = (chunks + segments - 1) / segments;
  first = z * per < chunks ? z * per : chunks;
  last = first + per < chunks ? first + per : chunks;
}

// Pass 2 of a split scan, per element of the (p, q) states of one slice: the segments' sums
// become the state each segment starts from. states: (slices, segments, p*q).
__global__ void linear_attention_segment_prefix_kernel(float* states, int64_t slices, int segments, int64_t pq,
                                                       ScanMode mode) {
  for (int64_t idx = device::global_index(); idx < slices * pq; idx += device::global_stride()) {
    float* s = states + (idx / pq) * segments * pq + idx % pq;
    if (mode == ScanMode::full) {  // every segment emits from the total
      float total = 0.0f;
      for (int z = 0; z < segments; ++z) total += s[z * pq];
      for (int z = 0; z < segments; ++z) s[z * pq] = total;
    } else {  // exclusive prefix (forward) or suffix (reverse) sums
      float run = 0.0f;
      for (int t = 0; t < segments; ++t) {
        const int z = mode == ScanMode::reverse ? segments - 1 - t : t;
        const float own = s[z * pq];
        s[z * pq] = run;
        run += own;
      }
    }
  }
}

// Launches pass 2 over states (slices, segments, pq).
inline void segment_prefix(float* states, int64_t slices, int64_t segments, int64_t pq, ScanMode mode) {
  tarn::launch(linear_attention_segment_prefix_kernel, device::grid_for(slices * pq), device::kBlock, 0, nullptr,
               states, slices, static_cast<int>(segments), pq, mode);
}

// out = U[:, :e] / (U[:, e] + eps) (stored as T), den = U[:, e]; u: (rows, e + 1) f32.
template <typename T>
__global__ void linear_attention_normalize_kernel(const float* u, T* out, float* den, int64_t rows, int e, float eps) {
  const int64_t total = rows * (e + 1);
  for (int64_t idx = device::global_index(); idx < total; idx += device::global_stride()) {
    const int64_t i = idx / (e + 1);
    const int m = static_cast<int>(idx % (e + 1));
    const float dn = u[i * (e + 1) + e];
    if (m == e)
      den[i] = dn;
    else
      out[i * e + m] = element_from_float<T>(u[idx] / (dn + eps));
  }
}

// g: (rows, e + 1) f32 = [dO / (den + eps) | -(dO . out) / (den + eps)], one warp per row; dout
// and out stored as T.
template <typename T>
__global__ void linear_attention_g_kernel(const T* dout, const T* out, const float* den, float* g, int64_t rows, int e,
                                          float eps) {
  const int lane = threadIdx.x % device::kWarp;
  const int64_t warp = device::global_index() / device::kWarp;
  const int64_t warps = device::global_stride() / device::kWarp;
  for (int64_t i = warp; i < rows; i += warps) {
    const float inv = 1.0f / (den[i] + eps);
    const T* dr = dout + i * e;
    const T* orow = out + i * e;
    float* gr = g + i * (e + 1);
    float dot = 0.0f;
    for (int m = lane; m < e; m += device::kWarp) {
      const float dm = element_to_float(dr[m]);
      dot += dm * element_to_float(orow[m]);
      gr[m] = dm * inv;
    }
    dot = device::warp_reduce(dot, device::Sum());
    if (lane == 0) gr[e] = -dot * inv;
  }
}

// Launches the normaliser (rows = B * H * Nq) and the G kernel, for either element type.
template <typename T>
void normalize_rows(const float* u, T* out, float* den, int64_t rows, int e, float eps) {
  tarn::launch(linear_attention_normalize_kernel<T>, device::grid_for(rows * (e + 1)), device::kBlock, 0, nullptr, u,
               out, den, rows, e, eps);
}
template <typename T>
void compute_g(const T* dout, const T* out, const float* den, float* g, int64_t rows, int e, float eps) {
  if (rows == 0) return;
  tarn::launch(linear_attention_g_kernel<T>, device::grid_for(rows * device::kWarp), device::kBlock, 0, nullptr, dout,
               out, den, g, rows, e, eps);
}

// The checks every linear-attention entry point makes (the bf16 ones add their width limit).
inline void check_linear_attention_args(const char* op, const cpu::LinearAttentionDims& dims,
                                        const cpu::LinearAttentionConfig& cfg) {
  TARN_ASSERT(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
              ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q, ", Nk=", dims.n_k, ")");
  TARN_ASSERT(dims.d > 0 && dims.e > 0, op, ": feature dim d=", dims.d, " and value dim e=", dims.e,
              " must be positive");
  TARN_ASSERT(!cfg.causal || dims.n_q == dims.n_k, op, ": causal attention needs Nq == Nk, got Nq=", dims.n_q,
              " Nk=", dims.n_k);
  TARN_ASSERT(cfg.eps > 0.0f, op, ": eps must be positive, got ", cfg.eps);
  TARN_ASSERT(cpu::feature_map_is_row_local(cfg.feature_map), op, ": the ", cpu::feature_map_name(cfg.feature_map),
              " feature map cannot be fused; apply it first (favor_forward) and pass identity");
}

inline void check_workspace(const char* op, const float* workspace, size_t have, size_t need) {
  TARN_ASSERT(need == 0 || (workspace && have >= need), op, ": workspace of ", have, " floats is smaller than the ",
              need, " it needs");
}

inline int sm_count() {
  static const int count = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) !=
                                                  cudaSuccess)
      n = 1;
    cudaGetLastError();  // a failed query is not an error of the next launch
    return n;
  }();
  return count;
}

// Segments of a sequence of `chunks` chunks for a scan with `blocks` blocks per segment: the
// forced count when a test set one, else enough to give kTargetBlocksPerSm blocks per SM when
// blocks are few, with at least min_chunks chunks each (shorter segments cost more in passes 1
// and 2 than they gain). Never more than the chunks.
inline int64_t plan_segments(int64_t chunks, int64_t min_chunks, int64_t blocks) {
  chunks = std::max<int64_t>(1, chunks);
  const int forced = linear_attention_forced_segments();
  if (forced > 0) return std::min<int64_t>(forced, chunks);
  const int64_t want_blocks = kTargetBlocksPerSm * sm_count();
  if (blocks <= 0 || blocks >= want_blocks) return 1;
  const int64_t want = (want_blocks + blocks - 1) / blocks;
  return std::max<int64_t>(1, std::min({want, chunks / min_chunks, kMaxSegments}));
}

}  // namespace
}  // namespace tarn::kernels::TARN_CUDA_NS
