// Layout copies behind transpose, permute, concat and slice (kernels/layout.h). The permute is
// planned by plan_permute, as on the CPU; when the innermost axis moves it goes through 32 x 32
// shared-memory tiles so that both the reads and the writes are coalesced.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using device::global_index;
using device::global_stride;
using device::kBlock;
using device::kMaxGridY;

constexpr int kTile = 32;      // transpose tile edge (one warp along it)
constexpr int kTileRows = 8;   // threads along the other edge: each moves kTile / kTileRows values
constexpr unsigned kMaxGridZ = 65535;

// dst[r * dst_stride + i] = src[r * src_stride + i]; x over i, y strides over rows.
__global__ void copy_rows_kernel(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                                 int64_t len) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= len) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) dst[r * dst_stride + i] = src[r * src_stride + i];
}

// One thread per position of the rows x cols masks.
__global__ void padding_from_lengths_kernel(const int32_t* lengths, int64_t rows, int64_t cols, float* mask,
                                            float* keep) {
  for (int64_t i = global_index(); i < rows * cols; i += global_stride()) {
    const bool pad = i % cols >= lengths[i / cols];
    mask[i] = pad ? 1.0f : 0.0f;
    keep[i] = pad ? 0.0f : 1.0f;
  }
}

// Merged output axes (kernels/layout.h), by value in the kernel parameters.
using Axes = cpu::PermuteAxes;

// Row-major index r over axes [0, n) of `a` -> (source offset, destination offset).
__device__ __forceinline__ void offsets(const Axes& a, int64_t r, int64_t* so, int64_t* dof) {
  int64_t s = 0, d = 0;
  for (int k = a.n - 1; k >= 0; --k) {
    const int64_t c = r % a.extent[k];
    r /= a.extent[k];
    s += c * a.src_stride[k];
    d += c * a.dst_stride[k];
  }
  *so = s;
  *dof = d;
}

// The innermost axis stays innermost: rows of `len` contiguous floats. `a` holds the outer axes.
__global__ void permute_rows_kernel(const float* src, float* dst, Axes a, int64_t rows, int64_t len) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= len) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    int64_t so, dof;
    offsets(a, r, &so, &dof);
    dst[dof + i] = src[so + i];
  }
}

// The innermost axis moves. Output axis p walks the source contiguously and output axis q
// (the innermost) has source stride sq; `batch` holds the other axes. Block (kTile, kTileRows)
// moves one tile of (p: i0.., q: j0..): reads along p, writes along q.
__global__ void __launch_bounds__(kTile * kTileRows) permute_tile_kernel(const float* src, float* dst, Axes batch, int64_t batches, int64_t np,
                                    int64_t nq, int64_t sq, int64_t dp) {
  __shared__ float tile[kTile][kTile + 1];  // +1: the column reads hit 32 different banks
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile, j0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t b = blockIdx.z; b < batches; b += gridDim.z) {
    int64_t so, dof;
    offsets(batch, b, &so, &dof);
    for (int jj = ty; jj < kTile; jj += kTileRows) {
      const int64_t i = i0 + tx, j = j0 + jj;
      if (i < np && j < nq) tile[jj][tx] = src[so + i + j * sq];
    }
    __syncthreads();
    for (int ii = ty; ii < kTile; ii += kTileRows) {
      const int64_t i = i0 + ii, j = j0 + tx;
      if (i < np && j < nq) dst[dof + i * dp + j] = tile[tx][ii];
    }
    __syncthreads();  // the tile is rewritten for the next batch
  }
}

}  // namespace

void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t len) {
  if (rows <= 0 || len <= 0) return;
  const dim3 grid(static_cast<unsigned>((len + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY)));
  tarn::launch(copy_rows_kernel, grid, kBlock, 0, nullptr, src, src_stride, dst, dst_stride, rows, len);
}

void padding_from_lengths(const int32_t* lengths, int64_t rows, int64_t cols, float* mask, float* keep) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(padding_from_lengths_kernel, device::grid_for(rows * cols), kBlock, 0, nullptr, lengths, rows, cols,
               mask, keep);
}

void permute(const float* src, float* dst, const int64_t* shape, const int* order, int ndim) {
  const cpu::PermutePlan plan = cpu::plan_permute(shape, order, ndim);
  const int64_t numel = plan.numel;
  if (numel == 0) return;
  if (plan.is_copy()) {  // the identity in disguise
    TARN_CUDA_CALL(cudaMemcpyAsync(dst, src, static_cast<size_t>(numel) * sizeof(float), cudaMemcpyDeviceToDevice,
                                   nullptr));
    return;
  }
  const Axes& a = plan.axes;
  const int q = a.n - 1;  // the innermost output axis
  if (plan.keeps_last_axis()) {
    const int64_t len = a.extent[q], rows = numel / len;
    const dim3 grid(static_cast<unsigned>((len + kBlock - 1) / kBlock),
                    static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY)));
    tarn::launch(permute_rows_kernel, grid, kBlock, 0, nullptr, src, dst, plan.except(q, q), rows, len);
    return;
  }
  const int p = plan.contiguous_axis();
  const Axes batch = plan.except(p, q);
  int64_t batches = 1;
  for (int d = 0; d < batch.n; ++d) batches *= batch.extent[d];
  const dim3 grid(static_cast<unsigned>((a.extent[q] + kTile - 1) / kTile),
                  static_cast<unsigned>((a.extent[p] + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(batches, kMaxGridZ)));
  TARN_ASSERT(grid.y <= kMaxGridY, "permute: axis of ", a.extent[p], " elements is too long for the tiled transpose");
  tarn::launch(permute_tile_kernel, grid, dim3(kTile, kTileRows), 0, nullptr, src, dst, batch, batches, a.extent[p],
               a.extent[q], a.src_stride[q], a.dst_stride[p]);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
