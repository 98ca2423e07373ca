// The recurrent decode step of linear attention on CUDA (kernels/linear_attention.h,
// linear_attention_step): one block per (batch, head) adds phi(b) v'^T to its f32 state and
// reads out phi(a)^T S' / (phi(a)^T z + eps), with the row-local feature maps (elu1, relu, exp,
// identity) applied as it reads a and b (kernels/cuda/feature_maps.cuh).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/feature_maps.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::FeatureMap;
using cpu::LinearAttentionConfig;
using cpu::LinearAttentionDims;

// The max of a raw row (for the exp map), by one thread: the step kernel's threads each need
// it, and a d-long read per thread costs no more than the thread's d-long column walk.
__device__ __forceinline__ float row_max_serial(const float* x, int d) {
  float m = x[0];
  for (int k = 1; k < d; ++k) m = x[k] > m ? x[k] : m;
  return m;
}

// One recurrent step per (batch, head), one block each: S' += phi(b) v'^T (unless padded), then
// out = phi(a)^T S' / (phi(a)^T z + eps). a, b: (slices, d) raw, v: (slices, e), state:
// (slices, d, e + 1), out: (slices, e); thread m owns column m of the state (blockDim.x >= e + 1).
// Up to kMaxStepThreads threads a block (e up to 1023): the bound holds ptxas to the registers
// that many threads can have.
constexpr int kMaxStepThreads = 1024;
__global__ void __launch_bounds__(kMaxStepThreads) linear_attention_step_kernel(const float* a, const float* b, const float* v, float* state,
                                             float* out, const float* pad, int64_t heads, int d, int e, float eps,
                                             FeatureMap map) {
  __shared__ float den;
  const int m = threadIdx.x;
  const int w = e + 1;
  const int64_t bh = blockIdx.x;
  const bool masked = pad && pad[bh / heads] != 0.0f;
  float acc = 0.0f;
  if (m < w) {
    const float* ar = a + bh * d;
    const float* br = b + bh * d;
    const bool is_exp = map == FeatureMap::exp;
    const float a_max = is_exp ? row_max_serial(ar, d) : 0.0f;
    const float b_max = is_exp ? row_max_serial(br, d) : 0.0f;
    const float vm = m < e ? v[bh * e + m] : 1.0f;
    float* col = state + bh * d * w + m;
    for (int k = 0; k < d; ++k) {
      float s = col[k * w];
      if (!masked) {
        s += fmap::phi(map, br[k], b_max) * vm;
        col[k * w] = s;
      }
      acc += fmap::phi(map, ar[k], a_max) * s;
    }
    if (m == e) den = acc;
  }
  __syncthreads();
  if (m < e) out[bh * e + m] = acc / (den + eps);
}

}  // namespace

void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,
                           const float* b, const float* v, float* state, float* out) {
  TARN_ASSERT(dims.d > 0 && dims.e > 0 && dims.batch >= 0 && dims.heads >= 0, "linear_attention_step: bad dims d=",
              dims.d, " e=", dims.e);
  TARN_ASSERT(cfg.eps > 0.0f, "linear_attention_step: eps must be positive, got ", cfg.eps);
  TARN_ASSERT(cpu::feature_map_is_row_local(cfg.feature_map), "linear_attention_step: the ",
              cpu::feature_map_name(cfg.feature_map), " feature map cannot be fused; apply it first and pass identity");
  const int64_t slices = dims.batch * dims.heads;
  if (slices == 0) return;
  const int64_t threads = (dims.e + 1 + device::kWarp - 1) / device::kWarp * device::kWarp;
  TARN_ASSERT(threads <= kMaxStepThreads, "linear_attention_step: value dim e=", dims.e, " is above the ",
              kMaxStepThreads - 1, " one block holds");
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;  // hardware limit of gridDim.x
  TARN_ASSERT(slices <= kMaxGridX, "linear_attention_step: ", slices, " (batch, head) pairs exceed one grid");
  tarn::launch(linear_attention_step_kernel, static_cast<unsigned>(slices), static_cast<unsigned>(threads), 0, nullptr,
               a, b, v, state, out, cfg.key_padding_mask, dims.heads, static_cast<int>(dims.d),
               static_cast<int>(dims.e), cfg.eps, cfg.feature_map);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
