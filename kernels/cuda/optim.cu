// Optimizer kernels over flat f32 arrays (kernels/optim.h): the fused AdamW update, the sum of
// squares behind the global gradient norm, and the in-place scale for clipping; the clipped
// update of a whole parameter arena in four launches (adamw_fused_step), and a training step's
// record.
//
// adamw_fused_step moves what the per-tensor path moves, once: a read of every gradient for the
// norm, then a read of every gradient, parameter and moment and a write of every parameter and
// moment, 7 x 4 bytes per element (1 GB for 36 M parameters: ~0.3 ms at an H100's ~3 TB/s),
// with ~10 flops per element (nothing near the compute bound). What it removes is the host:
// per parameter tensor, two launches and a read back for the norm and one launch for the update,
// each read back a wait for every kernel before it.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

// The update's scalars, folded on the host in double as the CPU kernel (and PyTorch) do.
struct AdamWScalars {
  float decay, step_size, bc2_sqrt, b1, b2, one_b1, one_b2, eps, grad_scale;
};

// param, grad, m, v: (n), updated in place.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars k) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float g = grad[i] * k.grad_scale;  // the clipping factor, as scale_kernel would store it
    const float mi = k.b1 * m[i] + k.one_b1 * g;
    const float vi = k.b2 * v[i] + k.one_b2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
    param[i] = param[i] * k.decay - k.step_size * (mi / denom);
  }
}

// partial[b] = sum of x_i^2 over block b's kSumSquaresBlock elements, in double (the CPU
// kernel's blocks; combined in block order below, so the result never depends on the launch).
__global__ void sum_squares_kernel(const float* x, int64_t n, double* partial) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * cpu::kSumSquaresBlock;
  const int64_t end = begin + cpu::kSumSquaresBlock < n ? begin + cpu::kSumSquaresBlock : n;
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double* partial, int64_t count, double* result) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) result[0] = s;
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = global_index(); i < n; i += global_stride()) x[i] *= s;
}

// The range that block b of the fused launches falls in: the last one whose first_block <= b
// (ranges without blocks share their first_block with the next one and are never chosen).
__device__ __forceinline__ int64_t range_of_block(const AdamWRange* ranges, int64_t count, int64_t b) {
  int64_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (ranges[mid].first_block <= b) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// partial[b] = Σ g² over block b: sum_squares_kernel's block of its range, so that the partials
// and their order are the per-tensor path's. Ranges without a gradient are skipped (their
// partials are never read).
__global__ void fused_sum_squares_kernel(const float* grad, const AdamWRange* ranges, int64_t count, double* partial) {
  const int64_t b = blockIdx.x;
  const AdamWRange range = ranges[range_of_block(ranges, count, b)];
  if (!range.has_grad) return;
  const float* x = grad + range.offset;
  const int64_t begin = (b - range.first_block) * cpu::kSumSquaresBlock;
  const int64_t end = begin + cpu::kSumSquaresBlock < range.numel ? begin + cpu::kSumSquaresBlock : range.numel;
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[b] = s;
}

// One block of kBlock threads: sums[r] = range r's partials summed as sum_partials_kernel sums a
// tensor's, 0 for a range without a gradient.
__global__ void fused_range_sums_kernel(const double* partial, const AdamWRange* ranges, int64_t count,
                                        double* sums) {
  for (int64_t r = 0; r < count; ++r) {
    const AdamWRange range = ranges[r];
    if (!range.has_grad) {  // the same for every thread
      if (threadIdx.x == 0) sums[r] = 0.0;
      continue;
    }
    const int64_t blocks = (range.numel + cpu::kSumSquaresBlock - 1) / cpu::kSumSquaresBlock;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[range.first_block + i];
    s = block_sum(s);
    if (threadIdx.x == 0) sums[r] = s;
  }
}

// One block of kBlock threads. The parts added in order from 0 (the ranges' sums as
// global_grad_norm adds them, or the ranks' sums as all_reduce_host adds them); then the norm,
// the clipping factor, the decision, and (when it applies) every range's step and scalars.
__global__ void fused_prepare_kernel(const double* parts, int64_t part_count, const AdamWRange* ranges,
                                     AdamWRangeState* state, int64_t count, AdamWFusedHyper h, const int32_t* skip,
                                     int64_t* applied_steps, AdamWOutcome* outcome) {
  __shared__ int applied;
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int64_t i = 0; i < part_count; ++i) total += parts[i];
    const double norm = sqrt(total);
    const bool bad = (skip && *skip) || !isfinite(norm) || (h.max_norm > 0.0f && !isfinite(static_cast<float>(norm)));
    outcome->norm = norm;
    outcome->scale = cpu::clip_scale(norm, h.max_norm);
    outcome->applied = bad ? 0 : 1;
    if (!bad) ++*applied_steps;
    applied = bad ? 0 : 1;
  }
  __syncthreads();
  if (!applied) return;
  // adamw_step's scalars, folded in double as the host folds them.
  for (int64_t r = threadIdx.x; r < count; r += blockDim.x) {
    if (!ranges[r].has_grad) continue;
    AdamWRangeState& st = state[r];
    const double t = static_cast<double>(++st.step);
    st.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * ranges[r].weight_decay);
    st.step_size = static_cast<float>(h.lr / (1.0 - pow(static_cast<double>(h.beta1), t)));
    st.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(h.beta2), t)));
  }
}

// adamw_kernel's arithmetic on block b's elements of its range, when the step applies.
__global__ void fused_adamw_kernel(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                                   const AdamWRangeState* state, int64_t count, AdamWFusedHyper h,
                                   const AdamWOutcome* outcome) {
  if (!outcome->applied) return;
  const int64_t b = blockIdx.x;
  const int64_t r = range_of_block(ranges, count, b);
  const AdamWRange range = ranges[r];
  if (!range.has_grad) return;
  const AdamWRangeState st = state[r];
  const float scale = outcome->scale;
  const float b1 = h.beta1, b2 = h.beta2, one_b1 = 1.0f - h.beta1, one_b2 = 1.0f - h.beta2, eps = h.eps;
  const int64_t begin = (b - range.first_block) * cpu::kSumSquaresBlock;
  const int64_t end = begin + cpu::kSumSquaresBlock < range.numel ? begin + cpu::kSumSquaresBlock : range.numel;
  param += range.offset;
  grad += range.offset;
  m += range.offset;
  v += range.offset;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = grad[i] * scale;
    const float mi = b1 * m[i] + one_b1 * g;
    const float vi = b2 * v[i] + one_b2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / st.bc2_sqrt + eps;
    param[i] = param[i] * st.decay - st.step_size * (mi / denom);
  }
}

__global__ void step_record_add_kernel(StepRecord* record, const float* loss, int64_t counted,
                                       const CrossEntropyTotals* totals, double nll) {
  const float l = *loss;
  if (!isfinite(l)) {
    record->loss_bad = 1;
    return;
  }
  record->loss_sum += static_cast<double>(l) * static_cast<double>(counted);
  record->nll_sum += totals ? totals->nll : nll;
}

__global__ void step_record_agree_kernel(StepRecord* record, const StepRecord* gathered, int64_t world) {
  cpu::agree_step_records(record, gathered, world);
}

__global__ void step_record_judge_kernel(StepRecord* record, int64_t global_counted, double diverged_loss) {
  cpu::judge_step_record(record, global_counted, diverged_loss);
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h) {
  if (n <= 0) return;
  const double t = static_cast<double>(h.step);
  AdamWScalars k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  k.step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  k.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
  k.b1 = h.beta1;
  k.b2 = h.beta2;
  k.one_b1 = 1.0f - h.beta1;
  k.one_b2 = 1.0f - h.beta2;
  k.eps = h.eps;
  k.grad_scale = h.grad_scale;
  tarn::launch(adamw_kernel, grid_for(n), kBlock, 0, nullptr, param, grad, m, v, n, k);
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + cpu::kSumSquaresBlock - 1) / cpu::kSumSquaresBlock;
  TARN_ASSERT(blocks <= 0x7fffffffLL, "sum_squares: ", n, " values is too many");
  Scratch<double> partial(blocks + 1);
  double* result = partial.get() + blocks;
  tarn::launch(sum_squares_kernel, static_cast<unsigned>(blocks), kBlock, 0, nullptr, x, n, partial.get());
  tarn::launch(sum_partials_kernel, 1, kBlock, 0, nullptr, static_cast<const double*>(partial.get()), blocks, result);
  return device::read_back(result);
}

void scale_inplace(float* x, int64_t n, float s) {
  if (n <= 0) return;
  tarn::launch(scale_kernel, grid_for(n), kBlock, 0, nullptr, x, n, s);
}

void sum_squares_into(const float* x, int64_t n, double* out) {
  const int64_t blocks = n > 0 ? (n + cpu::kSumSquaresBlock - 1) / cpu::kSumSquaresBlock : 0;
  TARN_ASSERT(blocks <= 0x7fffffffLL, "sum_squares_into: ", n, " values is too many");
  Scratch<double> partial(blocks > 0 ? blocks : 1);
  if (blocks > 0)
    tarn::launch(sum_squares_kernel, static_cast<unsigned>(blocks), kBlock, 0, nullptr, x, n, partial.get());
  tarn::launch(sum_partials_kernel, 1, kBlock, 0, nullptr, static_cast<const double*>(partial.get()), blocks, out);
}

void adamw_fused_update(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                        AdamWRangeState* state, int64_t count, int64_t blocks, const AdamWFusedHyper& h,
                        const double* parts, int64_t part_count, const int32_t* skip, int64_t* applied_steps,
                        AdamWOutcome* outcome) {
  TARN_ASSERT(blocks <= 0x7fffffffLL, "adamw_fused_update: ", blocks, " blocks is too many");
  tarn::launch(fused_prepare_kernel, 1, kBlock, 0, nullptr, parts, part_count, ranges, state, count, h, skip,
               applied_steps, outcome);
  if (blocks > 0 && count > 0)
    tarn::launch(fused_adamw_kernel, static_cast<unsigned>(blocks), kBlock, 0, nullptr, param, grad, m, v, ranges,
                 static_cast<const AdamWRangeState*>(state), count, h, static_cast<const AdamWOutcome*>(outcome));
}

// Four launches: the gradients' sums of squares by block, each range's sum, then
// adamw_fused_update's two over those sums.
void adamw_fused_step(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                      AdamWRangeState* state, int64_t count, int64_t blocks, const AdamWFusedHyper& h,
                      const int32_t* skip, int64_t* applied_steps, AdamWOutcome* outcome) {
  TARN_ASSERT(blocks <= 0x7fffffffLL, "adamw_fused_step: ", blocks, " blocks is too many");
  Scratch<double> partial(blocks + (count > 0 ? count : 1));
  double* sums = partial.get() + blocks;
  if (blocks > 0 && count > 0)
    tarn::launch(fused_sum_squares_kernel, static_cast<unsigned>(blocks), kBlock, 0, nullptr, grad, ranges, count,
                 partial.get());
  if (count > 0)
    tarn::launch(fused_range_sums_kernel, 1, kBlock, 0, nullptr, static_cast<const double*>(partial.get()), ranges,
                 count, sums);
  TARN_CUDA_NS::adamw_fused_update(param, grad, m, v, ranges, state, count, blocks, h,
                                   static_cast<const double*>(sums), count, skip, applied_steps, outcome);
}

void step_record_add(StepRecord* record, const float* loss, int64_t counted, const CrossEntropyTotals* totals,
                     double nll) {
  tarn::launch(step_record_add_kernel, 1, 1, 0, nullptr, record, loss, counted, totals, nll);
}

void step_record_agree(StepRecord* record, const StepRecord* gathered, int64_t world) {
  tarn::launch(step_record_agree_kernel, 1, 1, 0, nullptr, record, gathered, world);
}

void step_record_judge(StepRecord* record, int64_t global_counted, double diverged_loss) {
  tarn::launch(step_record_judge_kernel, 1, 1, 0, nullptr, record, global_counted, diverged_loss);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
