#pragma once
// One table of kernel entry points per device kind, so that an op picks its kernels with one
// branch on its inputs' device (framework/ops) instead of naming kernels::cpu:: or cuda::.
// Every kernel has the same raw-pointer signature on every device (kernels/cuda_kernels.h
// mirrors the CPU headers); the table's field types are taken from those declarations, so a
// signature that drifts apart on one device stops the table from compiling.
//
// Three tables exist:
//   cpu_backend()          kernels::cpu (always)
//   cuda::backend()        the nvcc build (tarn_kernels_cuda; only with TARN_WITH_CUDA)
//   cuda_emu::backend()    the same .cu sources against the CUDA emulator (tarn_kernels_emu,
//                          tests only): "device" memory is host memory
// cuda_backend() answers for CUDA devices: the table a test installed (the emulated one), else
// the nvcc build when a device is present, else it throws "no CUDA device ...". framework/
// never links the emulator: tests register it with install_cuda_backend().
#include <cstddef>
#include <cstdint>

#include "kernels/cuda_chunk_attention.h"
#include "kernels/cuda_delta_rule.h"
#include "kernels/cuda_delta_rule_bf16.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_linear_attention_bf16.h"
#include "kernels/cuda_softmax_attention.h"
#include "kernels/cuda_softmax_attention_bf16.h"
#include "kernels/cuda_taylor_map.h"
#include "kernels/feature_maps.h"

namespace tarn::kernels {

// The kernels a table carries, as X(name): X is applied to each (kernels/cuda/api.inc and the
// linear-attention declarations of kernels/cuda_kernels.h, kernels/cuda_softmax_attention.h,
// kernels/cuda_delta_rule.h, kernels/cuda_taylor_map.h, kernels/cuda_chunk_attention.h).
#define TARN_BACKEND_KERNELS(X)                                                                      \
  X(binary)                                                                                          \
  X(binary_row)                                                                                      \
  X(binary_broadcast)                                                                                \
  X(unary)                                                                                           \
  X(unary_backward)                                                                                  \
  X(sum_axis)                                                                                        \
  X(sum_all)                                                                                         \
  X(broadcast_axis)                                                                                  \
  X(softmax_forward)                                                                                 \
  X(log_softmax_forward)                                                                             \
  X(softmax_backward)                                                                                \
  X(log_softmax_backward)                                                                            \
  X(cross_entropy_forward)                                                                           \
  X(cross_entropy_backward)                                                                          \
  X(cross_entropy_forward_totals)                                                                    \
  X(cross_entropy_backward_mean)                                                                     \
  X(layer_norm_forward)                                                                              \
  X(layer_norm_backward)                                                                             \
  X(rms_norm_forward)                                                                                \
  X(rms_norm_backward)                                                                               \
  X(gelu_forward)                                                                                    \
  X(gelu_backward)                                                                                   \
  X(dropout_apply)                                                                                   \
  X(embedding_forward)                                                                               \
  X(embedding_backward)                                                                              \
  X(gemm_batched)                                                                                    \
  X(gemm_batched_bf16)                                                                               \
  X(bf16_gemm_engine)                                                                                \
  X(cast_to_bf16)                                                                                    \
  X(cast_from_bf16)                                                                                  \
  X(copy_rows)                                                                                       \
  X(permute)                                                                                         \
  X(padding_from_lengths)                                                                            \
  X(adamw_step)                                                                                      \
  X(sum_squares)                                                                                     \
  X(scale_inplace)                                                                                   \
  X(adamw_fused_step)                                                                                \
  X(sum_squares_into)                                                                                \
  X(adamw_fused_update)                                                                              \
  X(step_record_add)                                                                                 \
  X(step_record_agree)                                                                               \
  X(step_record_judge)                                                                               \
  X(linear_attention_forward_workspace_floats)                                                       \
  X(linear_attention_forward)                                                                        \
  X(linear_attention_backward_workspace_floats)                                                      \
  X(linear_attention_backward)                                                                       \
  X(linear_attention_step)                                                                           \
  X(favor_forward)                                                                                   \
  X(favor_backward_workspace_floats)                                                                 \
  X(favor_backward)                                                                                  \
  X(softmax_attention_forward_workspace_floats)                                                      \
  X(softmax_attention_forward)                                                                       \
  X(softmax_attention_backward_workspace_floats)                                                     \
  X(softmax_attention_backward)                                                                      \
  X(delta_rule_forward)                                                                              \
  X(delta_rule_backward_workspace_floats)                                                            \
  X(delta_rule_backward)                                                                             \
  X(delta_rule_step)                                                                                 \
  X(delta_rule_set_algorithm)                                                                        \
  X(causal_conv_forward)                                                                             \
  X(causal_conv_backward)                                                                            \
  X(taylor_map_forward)                                                                              \
  X(taylor_map_backward)                                                                             \
  X(chunk_mean_forward)                                                                              \
  X(chunk_mean_backward)                                                                             \
  X(chunk_choose)                                                                                    \
  X(chunk_attention_forward)                                                                         \
  X(chunk_attention_backward)

// The entry points of a bf16 attention kernel, given the function types of its two
// *_workspace_floats, its forward and its backward, and the largest d and e it takes.
template <typename WorkspaceFloats, typename Forward, typename Backward>
struct Bf16AttentionKernels {
  WorkspaceFloats* forward_workspace_floats;
  Forward* forward;
  WorkspaceFloats* backward_workspace_floats;
  Backward* backward;
  int64_t max_dim;  // largest d and e the kernels take
};

// Linear attention on bf16 inputs and outputs with f32 state (kernels/cuda_linear_attention_bf16.h),
// for training.precision bf16. Only CUDA has it: on the CPU the scan stays f32 (a profile of the
// small model's step puts the scan and its feature maps at ~5% of the step, so bf16 there could
// gain a few percent at most).
struct LinearAttentionBf16Kernels
    : Bf16AttentionKernels<decltype(cuda::linear_attention_bf16_forward_workspace_floats),
                           decltype(cuda::linear_attention_bf16_forward), decltype(cuda::linear_attention_bf16_backward)> {
  int64_t chunk;  // rows per chunk of the causal scan (fixed: LinearAttentionConfig::chunk is not read)
};

// Softmax attention on bf16 inputs and outputs, the tile products on tensor cores and the softmax
// in f32 (kernels/cuda_softmax_attention_bf16.h), for training.precision bf16. Only CUDA has it:
// the CPU's blocked kernel stays f32.
using SoftmaxAttentionBf16Kernels =
    Bf16AttentionKernels<decltype(cuda::softmax_attention_bf16_forward_workspace_floats),
                         decltype(cuda::softmax_attention_bf16_forward), decltype(cuda::softmax_attention_bf16_backward)>;

// The gated delta rule on bf16 q, k, v (and out, d_out, dq, dk, dv) with f32 gates, states and
// accumulation, its sub-chunk products on tensor cores (kernels/cuda_delta_rule_bf16.h), for
// training.precision bf16. Only CUDA has it: the CPU's scans stay f32.
struct DeltaRuleBf16Kernels {
  decltype(cuda::delta_rule_bf16_sub_chunk)* sub_chunk;  // 0: dk, dv do not fit the device
  decltype(cuda::delta_rule_bf16_forward_workspace_floats)* forward_workspace_floats;
  decltype(cuda::delta_rule_bf16_backward_workspace_floats)* backward_workspace_floats;
  decltype(cuda::delta_rule_bf16_forward)* forward;
  decltype(cuda::delta_rule_bf16_backward)* backward;
};

struct Backend {
  const char* name;  // "cpu", "cuda", "cuda (emulated)"

  // Memory. `device` is the CUDA ordinal (ignored on the CPU); copies are synchronous.
  void* (*allocate)(size_t bytes, int device);
  void (*deallocate)(void* ptr, int device);
  void (*copy_host_to_device)(void* dst, const void* src, size_t bytes, int device);
  void (*copy_device_to_host)(void* dst, const void* src, size_t bytes, int device);
  void (*copy_device_to_device)(void* dst, const void* src, size_t bytes, int device);
  void (*fill)(float* dst, int64_t n, float value);
  void (*accumulate)(float* dst, const float* src, int64_t n);  // dst += src
  // The device's free and total bytes (cudaMemGetInfo); null on the CPU, whose memory the
  // caller reads from the OS.
  void (*memory_info)(int device, size_t* free_bytes, size_t* total_bytes);
  // Batches going up without a wait (framework/staging.h); null on the CPU. Pinned host
  // memory; a copy from it queued on the device's stream ahead of the kernels launched after
  // it (cudaMemcpyAsync), the host not waiting, with an event recorded behind it in *event
  // (created when null); and, before the pinned memory is written again, a wait for that
  // event only if it has not passed (cudaEventQuery, then cudaEventSynchronize), which frees it.
  void* (*allocate_pinned)(size_t bytes);
  void (*deallocate_pinned)(void* ptr);
  void (*copy_pinned_to_device)(void* dst, const void* pinned_src, size_t bytes, int device, void** event);
  void (*finish_copy)(void* event);

  // Whether linear_attention_{forward,backward,step} apply this feature map themselves
  // (LinearAttentionConfig::feature_map); identity always is.
  bool (*linear_attention_fuses)(cpu::FeatureMap kind);
  // Largest head dimension (d and e) softmax_attention_{forward,backward} take; above it the
  // framework composes attention from matmul and softmax.
  int64_t softmax_attention_max_dim;
  // Rows per chunk of the causal linear-attention scan when the kernels fix it (CUDA), or 0
  // where they run LinearAttentionConfig::chunk (the CPU).
  int64_t linear_attention_chunk;
  // bf16 linear attention, or null where there is none (the CPU).
  const LinearAttentionBf16Kernels* linear_attention_bf16;
  // bf16 softmax attention, or null where there is none (the CPU).
  const SoftmaxAttentionBf16Kernels* softmax_attention_bf16;
  // The bf16 gated delta rule, or null where there is none (the CPU).
  const DeltaRuleBf16Kernels* delta_rule_bf16;

#define TARN_BACKEND_FIELD(name) decltype(&cuda::name) name;
  TARN_BACKEND_KERNELS(TARN_BACKEND_FIELD)
#undef TARN_BACKEND_FIELD
};

const Backend& cpu_backend();

// The table for CUDA devices (see above). Throws a message that says why there is none.
const Backend& cuda_backend();
// Number of usable CUDA devices: the installed table's (1 for the emulator), else the driver's.
int cuda_device_count();
// Installs `backend` for every CUDA device (nullptr restores the default). Call it before the
// first CUDA tensor exists: the allocator keeps the memory functions of the first use.
void install_cuda_backend(const Backend* backend);

namespace cuda {
const Backend& backend();  // tarn_kernels_cuda (kernels/cuda/backend.cu)
}
namespace cuda_emu {
const Backend& backend();  // tarn_kernels_emu (kernels/cuda/backend.cu against the emulator)
}

}  // namespace tarn::kernels
