// The CUDA table of kernels/backend.h. Built twice like every kernels/cuda/*.cu: by nvcc into
// tarn::kernels::cuda::backend() and against the emulator into cuda_emu::backend(), whose
// "device" memory is host memory (tests install it with install_cuda_backend).
#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_delta_rule_bf16.h"
#include "kernels/cuda_linear_attention_bf16.h"
#include "kernels/cuda_softmax_attention.h"
#include "kernels/cuda_softmax_attention_bf16.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

void* allocate(size_t bytes, int device) {
  void* p = nullptr;
  TARN_CUDA_CALL(cudaSetDevice(device));
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // out of memory: the caching allocator frees its cache and retries
    return nullptr;
  }
  return p;
}

void deallocate(void* p, int device) {
  if (!p) return;
  TARN_CUDA_CALL(cudaSetDevice(device));
  TARN_CUDA_CALL(cudaFree(p));
}

void copy_host_to_device(void* dst, const void* src, size_t bytes, int device) {
  TARN_CUDA_CALL(cudaSetDevice(device));
  TARN_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, int device) {
  TARN_CUDA_CALL(cudaSetDevice(device));
  TARN_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, int device) {
  TARN_CUDA_CALL(cudaSetDevice(device));
  TARN_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void* allocate_pinned(size_t bytes) {
  void* p = nullptr;
  TARN_CUDA_CALL(cudaMallocHost(&p, bytes));
  return p;
}

void deallocate_pinned(void* p) {
  if (p) TARN_CUDA_CALL(cudaFreeHost(p));
}

// On the legacy default stream, as every kernel: the copy lands before the next launch reads it.
void copy_pinned_to_device(void* dst, const void* src, size_t bytes, int device, void** event) {
  TARN_CUDA_CALL(cudaSetDevice(device));
  TARN_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, nullptr));
  cudaEvent_t e = static_cast<cudaEvent_t>(*event);
  if (!e) TARN_CUDA_CALL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *event = e;
  TARN_CUDA_CALL(cudaEventRecord(e, nullptr));
}

void finish_copy(void* event) {
  if (!event) return;
  cudaEvent_t e = static_cast<cudaEvent_t>(event);
  const cudaError_t state = cudaEventQuery(e);
  if (state == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the copy is still queued
    TARN_CUDA_CALL(cudaEventSynchronize(e));
  } else {
    TARN_CUDA_CALL(state);
  }
  TARN_CUDA_CALL(cudaEventDestroy(e));
}

// A fill is a zeroing memset plus, for other values, an in-place add (no kernel of its own).
void fill(float* dst, int64_t n, float value) {
  if (n <= 0) return;
  TARN_CUDA_CALL(cudaMemset(dst, 0, static_cast<size_t>(n) * sizeof(float)));
  if (value != 0.0f) TARN_CUDA_NS::unary(Unary::add_scalar, dst, dst, n, value);  // qualified: no ADL to cpu::
}

void accumulate(float* dst, const float* src, int64_t n) {
  if (n > 0) TARN_CUDA_NS::binary(Binary::add, dst, src, dst, n);
}

void memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  TARN_CUDA_CALL(cudaSetDevice(device));
  TARN_CUDA_CALL(cudaMemGetInfo(free_bytes, total_bytes));
}

// The CUDA linear-attention kernels apply every row-local map themselves (cuda_kernels.h);
// favor goes through favor_forward first, as on the CPU.
bool fuses(cpu::FeatureMap kind) { return cpu::feature_map_is_row_local(kind); }

// kernels/cuda_softmax_attention.h: 1 <= d, e <= 128.
constexpr int64_t kSoftmaxAttentionMaxDim = 128;

// kernels/cuda_linear_attention_bf16.h: 1 <= d, e <= 256.
const LinearAttentionBf16Kernels kLinearAttentionBf16 = {
    {&TARN_CUDA_NS::linear_attention_bf16_forward_workspace_floats, &TARN_CUDA_NS::linear_attention_bf16_forward,
     &TARN_CUDA_NS::linear_attention_bf16_backward_workspace_floats, &TARN_CUDA_NS::linear_attention_bf16_backward,
     256},
    kCudaLinearAttentionBf16Chunk};

// kernels/cuda_softmax_attention_bf16.h: 1 <= d, e <= 128.
const SoftmaxAttentionBf16Kernels kSoftmaxAttentionBf16 = {
    &TARN_CUDA_NS::softmax_attention_bf16_forward_workspace_floats, &TARN_CUDA_NS::softmax_attention_bf16_forward,
    &TARN_CUDA_NS::softmax_attention_bf16_backward_workspace_floats, &TARN_CUDA_NS::softmax_attention_bf16_backward,
    kSoftmaxAttentionMaxDim};

// kernels/cuda_delta_rule_bf16.h: dk, dv within the shared memory of a sub-chunk.
const DeltaRuleBf16Kernels kDeltaRuleBf16 = {
    &TARN_CUDA_NS::delta_rule_bf16_sub_chunk, &TARN_CUDA_NS::delta_rule_bf16_forward_workspace_floats,
    &TARN_CUDA_NS::delta_rule_bf16_backward_workspace_floats,
    &TARN_CUDA_NS::delta_rule_bf16_forward, &TARN_CUDA_NS::delta_rule_bf16_backward};

#if defined(__CUDACC__)
constexpr const char* kName = "cuda";
#else
constexpr const char* kName = "cuda (emulated)";
#endif

const Backend kTable = {
    kName, allocate, deallocate, copy_host_to_device, copy_device_to_host, copy_device_to_device,
    fill, accumulate, memory_info, allocate_pinned, deallocate_pinned, copy_pinned_to_device, finish_copy, fuses, kSoftmaxAttentionMaxDim, kCudaLinearAttentionChunk, &kLinearAttentionBf16,
    &kSoftmaxAttentionBf16, &kDeltaRuleBf16,
#define TARN_BACKEND_ENTRY(name) &TARN_CUDA_NS::name,
    TARN_BACKEND_KERNELS(TARN_BACKEND_ENTRY)
#undef TARN_BACKEND_ENTRY
};

}  // namespace

const Backend& backend() { return kTable; }

}  // namespace tarn::kernels::TARN_CUDA_NS
