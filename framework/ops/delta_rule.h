#pragma once
// The gated delta rule with autograd (kernels/delta_rule.h has the recurrence and its memory):
// the causal scan with a readout at every token (decoder self-attention, and each direction of
// the encoder's bidirectional layer) and the scan that only writes a state (the cross-attention
// writer, read by every target position), on the CPU and CUDA (kernels/cuda_delta_rule.h).
//
// Shapes: q, k (B, H, N, dk), unit rows; v (B, H, N, dv); beta, alpha (B, H, N).
#include <cstdint>

#include "framework/precision.h"
#include "framework/tensor.h"
#include "kernels/delta_rule.h"

namespace tarn {

struct DeltaRuleOptions {
  bool reverse = false;  // scan from the last position to the first
  int64_t chunk = kernels::cpu::kDefaultDeltaRuleChunk;  // tokens between the backward's checkpoints
  bool erase = true;  // false: S_t = alpha_t S_{t-1} + beta_t k_t v_t^T (kind gated)
  // bf16: where the device has bf16 delta-rule kernels (CUDA: kernels/cuda_delta_rule_bf16.h,
  // dk and dv within its shared memory), q, k and v are rounded to bf16 and the sub-chunks'
  // products run on tensor cores with f32 gates, states and accumulation; out and the gradients
  // come back as f32 tensors. Elsewhere (the CPU) the f32 kernels run: delta_rule_runs_in_bf16
  // says which.
  Precision precision = Precision::f32;
};

// Whether delta_rule and delta_rule_state with precision bf16 run the bf16 kernels on `device`
// for key and value widths dk, dv and checkpoints every `chunk` tokens (else they run in f32).
bool delta_rule_runs_in_bf16(Device device, int64_t dk, int64_t dv,
                             int64_t chunk = kernels::cpu::kDefaultDeltaRuleChunk);

// out (B, H, N, dv): row t = S_t^T q_t.
Tensor delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& alpha,
                  const DeltaRuleOptions& opt = {});

// The state after the last token, (B, H, dk, dv).
Tensor delta_rule_state(const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& alpha,
                        const DeltaRuleOptions& opt = {});

// Which algorithm the scans on `device` run from now on (kernels/delta_rule.h; process-wide):
// benches compare them, tests pin one. automatic is the default.
void set_delta_rule_algorithm(Device device, kernels::DeltaRuleAlgorithm algorithm);

// Decoding: one token (q, k (B, H, dk); v (B, H, dv); beta, alpha (B, H)) written into state
// (B, H, dk, dv) in place; returns S^T q (B, H, dv). No autograd.
Tensor delta_rule_step(Tensor& state, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                       const Tensor& alpha, bool erase = true);

}  // namespace tarn
