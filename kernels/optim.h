#pragma once
// Optimizer kernels over flat f32 arrays: the fused AdamW update, the sum of squares behind
// the global gradient norm, and an in-place scale for clipping. Raw pointers in, nothing else.
// Then the whole update of a parameter arena in one call (adamw_fused_step: norm, clipping
// factor, skip decision and every range's AdamW, nothing read back), and the record of a
// training step that stays where the step runs until the host asks for it (StepRecord).
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/host_device.h"

namespace tarn::kernels::cpu {

// What every AdamW update reads: learning rate, betas and eps, with torch.optim.AdamW's defaults.
struct AdamWRates {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Hyper-parameters of one AdamW update. `step` is the 1-based index of this update for this
// parameter (bias correction uses beta^step), as PyTorch's per-parameter state["step"].
struct AdamWHyper : AdamWRates {
  float weight_decay = 0.0f;
  int64_t step = 1;
  // Multiplies each gradient as the update reads it: the clipping factor, applied inside the
  // update's pass instead of a pass of its own. g * s in f32 is what scale_inplace stores, so
  // the update has the same bits either way; 1 leaves g exactly as it is.
  float grad_scale = 1.0f;
};

// One AdamW update in place, as torch.optim.AdamW (Loshchilov & Hutter, decoupled decay), of
// the gradient g = grad * grad_scale:
//   p <- p * (1 - lr*wd)
//   m <- b1*m + (1-b1)*g            v <- b2*v + (1-b2)*g^2
//   p <- p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// param, grad, m, v: (n). Elementwise, so the result does not depend on the thread count.
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h);

// Σ x_i² accumulated in double over fixed blocks of kSumSquaresBlock elements whose partial
// sums are added in block order: the same bits for any thread count.
constexpr int64_t kSumSquaresBlock = 8192;
double sum_squares(const float* x, int64_t n);

// x <- x * s.
void scale_inplace(float* x, int64_t n, float s);

// torch.nn.utils.clip_grad_norm_ adds this to the norm before dividing, so that a norm of
// exactly max_norm scales by a hair under 1 and a zero norm never divides by zero.
constexpr double kClipEpsilon = 1e-6;

// The factor that clips a global gradient norm to max_norm: max_norm / (norm + kClipEpsilon) in
// f32 when norm exceeds max_norm, else 1 (also for max_norm 0, no clipping, and a norm that is
// not finite). One definition for the host (framework/optim/clip_grad.h) and the device.
TARN_HOST_DEVICE float clip_scale(double norm, float max_norm) {
  const bool finite = norm - norm == 0.0;  // false for inf and NaN
  if (!(max_norm > 0.0f) || !finite || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + kClipEpsilon));
}

// ---------------------------------------------------------------------------------------------
// The fused update of a parameter arena (framework/parameter_arena.h): parameters, gradients and
// both moments are four buffers of one layout, and each parameter is a range of them.

// One parameter's range, as adamw_fused_step reads it (a table in the buffers' memory, written
// by the host when it changes).
struct AdamWRange {
  int64_t offset = 0;       // elements [offset, offset + numel) of the four buffers
  int64_t numel = 0;
  int64_t first_block = 0;  // its first block of kSumSquaresBlock elements, over every range before it
  float weight_decay = 0.0f;
  int32_t has_grad = 0;     // 0: no gradient this step: left out of the norm and not updated
};

// What the update keeps per range from step to step (in the buffers' memory): the number of
// updates applied (AdamWHyper::step of the next one is step + 1) and the scalars of the last
// one, which the device folds in double as the host would.
struct AdamWRangeState {
  int64_t step = 0;
  float decay = 0.0f, step_size = 0.0f, bc2_sqrt = 0.0f;
};

// The step's settings (host values): learning rate, betas, eps, and the global norm to clip to
// (0: none).
struct AdamWFusedHyper : AdamWRates {
  float max_norm = 0.0f;
};

// What adamw_fused_step decided (in the buffers' memory; the host reads it when it wants to).
struct AdamWOutcome {
  double norm = 0.0;    // the global gradient norm, before clipping
  float scale = 1.0f;   // clip_scale(norm, max_norm): the factor each gradient was read with
  int32_t applied = 0;  // 0: skipped, nothing changed
};

// Sets every range's first_block (host memory) and returns the blocks of all of them.
int64_t adamw_fused_layout(AdamWRange* ranges, int64_t count);

// The whole step of clipped AdamW over the ranges, in one call and without reading anything
// back (the CUDA version is four launches: the gradients' sums of squares by block, each range's
// sum, one block that forms the norm, the factor and every range's scalars, and the update of
// every element):
//   norm = sqrt(Σ over ranges with a gradient of sum_squares(range)), the per-range sums and
//     then their total added in range order, each range's sum as sum_squares forms it: the bits
//     of global_grad_norm over the same parameters on the same device;
//   skipped (parameters, moments, states and *applied_steps untouched) when *skip is nonzero
//     (skip may be null), when the norm is not finite, or when clipping and the norm is not
//     finite in f32 (as clip_grad_norm reports it);
//   else, for every range with a gradient, state.step + 1 and adamw_step with that step, the
//     range's weight decay and grad_scale = clip_scale(norm, max_norm): the bits of adamw_step
//     called per range (on CUDA the bias corrections are folded on the device, in double: the
//     emulator's pow is the host's; a GPU's is within 2 ulps of it, which can move a scalar's
//     f32 rounding only when the double lies that close to a rounding boundary);
//     ++*applied_steps.
// param, grad, m, v: the arena's buffers; ranges, state: `count` entries; blocks =
// adamw_fused_layout(ranges). skip, applied_steps, outcome: in the buffers' memory.
void adamw_fused_step(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                      AdamWRangeState* state, int64_t count, int64_t blocks, const AdamWFusedHyper& h,
                      const int32_t* skip, int64_t* applied_steps, AdamWOutcome* outcome);

// adamw_fused_step in its two halves, for when the norm's sum of squares must cross ranks in
// between (ZeRO-1, framework/distributed/sharded_adamw.h) without the host reading it:
//   sum_squares_into(x, n, out): *out = sum_squares(x, n), the same bits, left in the buffers'
//     memory (the CUDA version is sum_squares without its read back);
//   adamw_fused_update(..., parts, part_count, ...): adamw_fused_step with the norm taken as
//     sqrt(((0 + parts[0]) + parts[1]) + ...), the parts added in order (in the buffers'
//     memory: the ranks' sums in rank order, as Communicator::all_reduce_host adds them).
// adamw_fused_step is adamw_fused_update over the ranges' own sums (0 for a range without a
// gradient, which adds nothing), so both halves are also the one-rank step's arithmetic.
void sum_squares_into(const float* x, int64_t n, double* out);
void adamw_fused_update(float* param, const float* grad, float* m, float* v, const AdamWRange* ranges,
                        AdamWRangeState* state, int64_t count, int64_t blocks, const AdamWFusedHyper& h,
                        const double* parts, int64_t part_count, const int32_t* skip, int64_t* applied_steps,
                        AdamWOutcome* outcome);

// ---------------------------------------------------------------------------------------------
// A training step's record (framework/train/step.h), kept where the step runs so that the host
// need not read the loss back before it wants to: each micro-batch adds its loss, the step
// judges the mean, and adamw_fused_step writes `update` (skipping when loss_bad is set).
struct StepRecord {
  double loss_sum = 0.0;  // Σ micro-batches' mean loss (f32) x their counted targets, in double
  double nll_sum = 0.0;   // Σ their summed NLL
  int32_t loss_bad = 0;   // a loss that is not finite, or a mean over the step above the bound
  int32_t padding = 0;   // keeps `update` on 8 bytes
  AdamWOutcome update;
};

// One micro-batch: loss_sum += *loss x counted and nll_sum += totals->nll (nll when totals is
// null), or loss_bad = 1 when *loss is not finite (the sums then mean nothing). One thread.
void step_record_add(StepRecord* record, const float* loss, int64_t counted, const CrossEntropyTotals* totals,
                     double nll);
// Several ranks: `gathered` holds every rank's record (an all-gather of their bytes, which moves
// bits and adds nothing); *record <- their agreement: loss_sum and nll_sum added in rank order in
// double from 0 (the bits Communicator::all_reduce_host gives), loss_bad set when any rank's is.
// `update` is left alone. One thread.
void step_record_agree(StepRecord* record, const StepRecord* gathered, int64_t world);
// The step's verdict: loss_bad = 1 unless loss_sum / global_counted <= diverged_loss. One thread.
void step_record_judge(StepRecord* record, int64_t global_counted, double diverged_loss);

// The arithmetic of step_record_agree and step_record_judge, one definition for the CPU and the
// CUDA kernel (one thread each).
TARN_HOST_DEVICE void agree_step_records(StepRecord* record, const StepRecord* gathered, int64_t world) {
  double loss = 0.0, nll = 0.0;
  int32_t bad = 0;
  for (int64_t r = 0; r < world; ++r) {
    loss += gathered[r].loss_sum;
    nll += gathered[r].nll_sum;
    bad |= gathered[r].loss_bad != 0 ? 1 : 0;
  }
  record->loss_sum = loss;
  record->nll_sum = nll;
  record->loss_bad = bad;
}

TARN_HOST_DEVICE void judge_step_record(StepRecord* record, int64_t global_counted, double diverged_loss) {
  if (!(record->loss_sum / static_cast<double>(global_counted) <= diverged_loss)) record->loss_bad = 1;
}

}  // namespace tarn::kernels::cpu
