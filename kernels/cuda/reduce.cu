// Sums over one axis and over everything, and the broadcast that is their backward
// (kernels/reduce.h). Deterministic: every sum is cut into pieces whose boundaries depend only
// on the sizes, and the pieces are combined in a fixed order; no atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr int64_t kChunkRows = 256;          // middle-axis rows per partial sum
constexpr int64_t kEnoughThreads = 1 << 16;  // below this many outputs, split the middle axis
constexpr int kSumAllPerThread = 8;          // sum_all: values per thread per block, at least
constexpr int64_t kSumAllMaxBlocks = 1024;

// x (outer, n) -> out (outer): one block per row, grid-stride over rows.
__global__ void sum_rows_kernel(const float* x, float* out, int64_t outer, int64_t n, float alpha) {
  for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
    const float* row = x + r * n;
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += row[k];
    s = block_sum(s);
    if (threadIdx.x == 0) out[r] = alpha * s;
  }
}

// x (outer, n, inner): partial[chunk][o * inner + i] = scale * sum of rows
// [chunk * chunk_rows, +chunk_rows) of the middle axis. x over outputs, y over chunks.
__global__ void sum_middle_kernel(const float* x, float* partial, int64_t outer, int64_t n, int64_t inner,
                                  int64_t chunk_rows, float scale) {
  const int64_t outputs = outer * inner;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= outputs) return;
  const int64_t o = j / inner, i = j % inner;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t k1 = k0 + chunk_rows < n ? k0 + chunk_rows : n;
  const float* base = x + o * n * inner + i;
  float s = 0.0f;
  for (int64_t k = k0; k < k1; ++k) s += base[k * inner];
  partial[static_cast<int64_t>(blockIdx.y) * outputs + j] = scale * s;
}

// out[j] = alpha * sum over chunks of partial[chunk][j], chunks in order.
__global__ void sum_chunks_kernel(const float* partial, float* out, int64_t outputs, int64_t chunks, float alpha) {
  for (int64_t j = global_index(); j < outputs; j += global_stride()) {
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * outputs + j];
    out[j] = alpha * s;
  }
}

// *out = the sum of every thread's s over the block (every thread calls it; thread 0 writes).
__device__ __forceinline__ void write_block_sum(double s, double* out) {
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// partial[block] = sum of the block's grid-stride share of x, in double.
__global__ void sum_all_kernel(const float* x, int64_t n, double* partial) {
  double s = 0.0;
  for (int64_t i = global_index(); i < n; i += global_stride()) s += x[i];
  write_block_sum(s, partial + blockIdx.x);
}

// One block: result[0] = sum of partial[0 .. count), in a fixed order.
__global__ void sum_partials_kernel(const double* partial, int64_t count, double* result) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  write_block_sum(s, result);
}

// dx (outer, n, inner) = alpha * dy (outer, inner). x over inner, y strides over outer * n rows.
__global__ void broadcast_axis_kernel(const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner,
                                      float alpha) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= inner) return;
  for (int64_t r = blockIdx.y; r < outer * n; r += gridDim.y) dx[r * inner + i] = alpha * dy[(r / n) * inner + i];
}

}  // namespace

void sum_axis(const float* x, float* out, int64_t outer, int64_t n, int64_t inner, float alpha) {
  if (outer <= 0 || inner <= 0) return;
  const int64_t outputs = outer * inner;
  if (n <= 0) {
    TARN_CUDA_CALL(cudaMemsetAsync(out, 0, static_cast<size_t>(outputs) * sizeof(float), nullptr));
    return;
  }
  if (inner == 1) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outer, device::kMaxGridY));
    tarn::launch(sum_rows_kernel, blocks, device::threads_for_row(n), 0, nullptr, x, out, outer, n, alpha);
    return;
  }
  // Few outputs and a long middle axis: split it into chunks summed separately, then add the
  // chunk sums in order.
  int64_t chunks = 1;
  if (outputs < kEnoughThreads && n > kChunkRows) chunks = std::min<int64_t>((n + kChunkRows - 1) / kChunkRows, device::kMaxGridY);
  const int64_t chunk_rows = (n + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((outputs + kBlock - 1) / kBlock), static_cast<unsigned>(chunks));
  if (chunks == 1) {
    tarn::launch(sum_middle_kernel, grid, kBlock, 0, nullptr, x, out, outer, n, inner, chunk_rows, alpha);
    return;
  }
  Scratch<float> partial(chunks * outputs);
  tarn::launch(sum_middle_kernel, grid, kBlock, 0, nullptr, x, partial.get(), outer, n, inner, chunk_rows, 1.0f);
  tarn::launch(sum_chunks_kernel, grid_for(outputs), kBlock, 0, nullptr, static_cast<const float*>(partial.get()),
               out, outputs, chunks, alpha);
}

double sum_all(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = std::min<int64_t>((n + kBlock * kSumAllPerThread - 1) / (kBlock * kSumAllPerThread),
                                           kSumAllMaxBlocks);
  Scratch<double> partial(blocks + 1);
  double* result = partial.get() + blocks;
  tarn::launch(sum_all_kernel, static_cast<unsigned>(blocks), kBlock, 0, nullptr, x, n, partial.get());
  tarn::launch(sum_partials_kernel, 1, kBlock, 0, nullptr, static_cast<const double*>(partial.get()), blocks, result);
  return device::read_back(result);
}

void broadcast_axis(const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner, float alpha) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  const dim3 grid(static_cast<unsigned>((inner + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(outer * n, device::kMaxGridY)));
  tarn::launch(broadcast_axis_kernel, grid, kBlock, 0, nullptr, dy, dx, outer, n, inner, alpha);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
