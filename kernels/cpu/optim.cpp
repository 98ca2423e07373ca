#include "kernels/optim.h"

#include <cmath>
#include <vector>

#include "kernels/parallel.h"

namespace tarn::kernels::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h) {
  // Scalars folded once, in double, as PyTorch computes them on the host.
  const double t = static_cast<double>(h.step);
  const float decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  const float step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
  const float b1 = h.beta1, b2 = h.beta2, one_b1 = 1.0f - h.beta1, one_b2 = 1.0f - h.beta2, eps = h.eps;
  const float scale = h.grad_scale;

#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * scale;
    const float mi = b1 * m[i] + one_b1 * g;
    const float vi = b2 * v[i] + one_b2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    param[i] = param[i] * decay - step_size * (mi / denom);
  }
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumSquaresBlock;
    const int64_t end = begin + kSumSquaresBlock < n ? begin + kSumSquaresBlock : n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

int64_t adamw_fused_layout(AdamWRange* ranges, int64_t count) {
  int64_t blocks = 0;
  for (int64_t r = 0; r < count; ++r) {
    ranges[r].first_block = blocks;
    blocks += (ranges[r].numel + kSumSquaresBlock - 1) / kSumSquaresBlock;
  }
  return blocks;
}

void sum_squares_into(const float* x, int64_t n, double* out) { *out = sum_squares(x, n); }

// The per-range calls of sum_squares and adamw_step, in range order: the bits of the per-tensor
// path by construction (the CUDA version reproduces this arithmetic in its launches).
void adamw_fused_step(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                      AdamWRangeState* state, int64_t count, int64_t blocks, const AdamWFusedHyper& h,
                      const int32_t* skip, int64_t* applied_steps, AdamWOutcome* outcome) {
  std::vector<double> sums(static_cast<size_t>(count), 0.0);
  for (int64_t r = 0; r < count; ++r)
    if (ranges[r].has_grad) sums[static_cast<size_t>(r)] = sum_squares(grad + ranges[r].offset, ranges[r].numel);
  adamw_fused_update(param, grad, m, v, ranges, state, count, blocks, h, sums.data(), count, skip, applied_steps,
                     outcome);
}

void adamw_fused_update(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                        AdamWRangeState* state, int64_t count, int64_t, const AdamWFusedHyper& h,
                        const double* parts, int64_t part_count, const int32_t* skip, int64_t* applied_steps,
                        AdamWOutcome* outcome) {
  double total = 0.0;
  for (int64_t i = 0; i < part_count; ++i) total += parts[i];
  const double norm = std::sqrt(total);
  const bool bad = (skip && *skip) || !std::isfinite(norm) ||
                   (h.max_norm > 0.0f && !std::isfinite(static_cast<float>(norm)));
  outcome->norm = norm;
  outcome->scale = clip_scale(norm, h.max_norm);
  outcome->applied = bad ? 0 : 1;
  if (bad) return;
  ++*applied_steps;
  for (int64_t r = 0; r < count; ++r) {
    const AdamWRange& range = ranges[r];
    if (!range.has_grad) continue;
    AdamWHyper step;
    step.lr = h.lr;
    step.beta1 = h.beta1;
    step.beta2 = h.beta2;
    step.eps = h.eps;
    step.weight_decay = range.weight_decay;
    step.step = ++state[r].step;
    step.grad_scale = outcome->scale;
    const int64_t o = range.offset;
    adamw_step(param + o, grad + o, m + o, v + o, range.numel, step);
  }
}

void step_record_add(StepRecord* record, const float* loss, int64_t counted, const CrossEntropyTotals* totals,
                     double nll) {
  if (!std::isfinite(*loss)) {
    record->loss_bad = 1;
    return;
  }
  record->loss_sum += static_cast<double>(*loss) * static_cast<double>(counted);
  record->nll_sum += totals ? totals->nll : nll;
}

void step_record_agree(StepRecord* record, const StepRecord* gathered, int64_t world) {
  agree_step_records(record, gathered, world);
}

void step_record_judge(StepRecord* record, int64_t global_counted, double diverged_loss) {
  judge_step_record(record, global_counted, diverged_loss);
}

}  // namespace tarn::kernels::cpu
