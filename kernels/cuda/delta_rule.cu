// The gated delta rule on CUDA (kernels/cuda_delta_rule.h): the entry points, which run the
// chunked kernels (kernels/cuda/delta_rule_chunked.cu) where they fit and this file's otherwise,
// and this file's kernels: the CPU's recurrence (kernels/delta_rule.h), one thread per (slice,
// value column). Column j of the state obeys
//
//   u_j = S[:, j] . k_t,   w_j = beta_t (v_tj - alpha_t u_j)  (beta_t v_tj without the erase),
//   S[:, j] <- alpha_t S[:, j] + k_t w_j,   out_tj = S[:, j] . q_t
//
// on its own, so the forward and the decoding step run a warp per 32 columns with no barrier;
// every thread of a warp reads the same k_t, q_t (one broadcast load). The backward needs sums
// over the columns (dq_t, dk_t, d_beta_t, d_alpha_t) and runs one block per slice.
#include <algorithm>
#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/delta_rule_chunked.cuh"
#include "kernels/cuda_delta_rule.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::DeltaRuleConfig;
using cpu::DeltaRuleDims;

constexpr int kColumnsPerWarp = device::kWarp;
constexpr int kMaxColumns = 1024;  // the backward's block holds a slice's columns

__device__ __forceinline__ int64_t position(bool reverse, int64_t n, int64_t t) { return reverse ? n - 1 - t : t; }

// x . col over dk entries of a column strided by `stride`.
__device__ __forceinline__ float column_dot(const float* col, int64_t stride, const float* x, int64_t dk) {
  float acc = 0.0f;
  for (int64_t i = 0; i < dk; ++i) acc += col[i * stride] * x[i];
  return acc;
}

// Writes token `row` into column j (held at col[i * stride]) and returns w_j.
__device__ __forceinline__ float write_token(float* col, int64_t stride, const float* k, float v, float beta,
                                             float alpha, int64_t dk, bool erase) {
  const float w = erase ? beta * (v - alpha * column_dot(col, stride, k, dk)) : beta * v;
  for (int64_t i = 0; i < dk; ++i) col[i * stride] = alpha * col[i * stride] + k[i] * w;
  return w;
}

// Grid (slices, column tiles), a warp each; the column lives in shared memory, one bank a thread
// (entry i of thread x at i * 32 + x).
__global__ void delta_rule_forward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, const float* q, const float* k,
                                          const float* v, const float* beta, const float* alpha, float* out,
                                          float* final_state, float* checkpoints, int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(float, smem);
  const int64_t b = blockIdx.x, j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= dims.dv) return;  // no barrier follows
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv;
  float* s = smem + threadIdx.x;
  const int64_t stride = blockDim.x;
  for (int64_t i = 0; i < dk; ++i) s[i * stride] = 0.0f;
  for (int64_t t = 0; t < n; ++t) {
    if (checkpoints != nullptr && t > 0 && t % cfg.chunk == 0) {
      float* c = checkpoints + (b * per_slice_checkpoints + t / cfg.chunk - 1) * state + j;
      for (int64_t i = 0; i < dk; ++i) c[i * dv] = s[i * stride];
    }
    const int64_t row = b * n + position(cfg.reverse, n, t);
    write_token(s, stride, k + row * dk, v[row * dv + j], beta[row], alpha[row], dk, cfg.erase);
    if (q != nullptr) out[row * dv + j] = column_dot(s, stride, q + row * dk, dk);
  }
  if (final_state != nullptr)
    for (int64_t i = 0; i < dk; ++i) final_state[b * state + i * dv + j] = s[i * stride];
}

// The reduction rows of the backward: per column, dk partials of dq, dk of dk, then d_beta and
// d_alpha; the stride is odd so that a warp's columns write to distinct banks.
__host__ __device__ __forceinline__ int64_t reduction_stride(int64_t dk) { return 2 * dk + 3; }

// One block per slice, a thread per column (blockDim.x >= dv, whole warps). Shared memory: ds
// (dk entries a thread, at i * blockDim.x + x) and the reduction rows (blockDim.x of them).
// Workspace: L + 1 states a slice (L = min(chunk, n)), a chunk's states recomputed from its
// checkpoint.
__global__ void delta_rule_backward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, const float* q, const float* k,
                                           const float* v, const float* beta, const float* alpha,
                                           const float* checkpoints, const float* d_out, const float* d_final_state,
                                           float* dq, float* dk_out, float* dv_out, float* d_beta, float* d_alpha,
                                           float* workspace, int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(float, smem);
  const int64_t b = blockIdx.x, j = threadIdx.x, threads = blockDim.x;
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv, chunk = cfg.chunk;
  const int64_t R = reduction_stride(dk);
  const bool column = j < dv, readout = q != nullptr;
  float* ds = smem + j;  // ds[i * threads]
  float* red = smem + dk * threads;
  float* mine = red + j * R;
  const int64_t longest = chunk < n ? chunk : n;
  float* states = workspace + b * (longest + 1) * state + j;  // states[(s * dk + i) * dv]
  if (column)
    for (int64_t i = 0; i < dk; ++i)
      ds[i * threads] = d_final_state != nullptr ? d_final_state[b * state + i * dv + j] : 0.0f;
  for (int64_t c = (n + chunk - 1) / chunk - 1; c >= 0; --c) {
    const int64_t t0 = c * chunk, t1 = t0 + chunk < n ? t0 + chunk : n;
    if (column) {  // recompute the chunk's states: states[s] is S before token t0 + s
      const float* from = c == 0 ? nullptr : checkpoints + (b * per_slice_checkpoints + c - 1) * state + j;
      for (int64_t i = 0; i < dk; ++i) states[i * dv] = from != nullptr ? from[i * dv] : 0.0f;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = b * n + position(cfg.reverse, n, t);
        float* next = states + (t - t0 + 1) * state;
        for (int64_t i = 0; i < dk; ++i) next[i * dv] = next[i * dv - state];
        write_token(next, dv, k + row * dk, v[row * dv + j], beta[row], alpha[row], dk, cfg.erase);
      }
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const int64_t row = b * n + position(cfg.reverse, n, t);
      const float* kt = k + row * dk;
      const float bt = beta[row], at = alpha[row];
      if (column) {
        const float* prev = states + (t - t0) * state;
        const float* cur = prev + state;
        if (readout) {  // out_t = S_t^T q_t: dq_t = S_t dout_t, dS_t += q_t dout_t^T
          const float* qt = q + row * dk;
          const float g = d_out[row * dv + j];
          for (int64_t i = 0; i < dk; ++i) {
            mine[i] = cur[i * dv] * g;
            ds[i * threads] += qt[i] * g;
          }
        }
        // The write S_t = alpha S_{t-1} + k w^T, w = beta (v - alpha u), u = S_{t-1}^T k; without
        // the erase u counts as 0 (w = beta v).
        const float u = cfg.erase ? column_dot(prev, dv, kt, dk) : 0.0f;
        const float dw = column_dot(ds, threads, kt, dk);
        const float r = v[row * dv + j] - at * u;
        const float w = bt * r;
        const float du = cfg.erase ? -at * bt * dw : 0.0f;
        float da = -bt * dw * u;
        dv_out[row * dv + j] = bt * dw;
        for (int64_t i = 0; i < dk; ++i) {
          const float p = prev[i * dv], d = ds[i * threads];
          mine[dk + i] = d * w + p * du;
          da += d * p;
          ds[i * threads] = at * d + kt[i] * du;
        }
        mine[2 * dk] = dw * r;
        mine[2 * dk + 1] = da;
      }
      __syncthreads();  // the columns' partials are in
      for (int64_t p = readout ? j : dk + j; p < 2 * dk + 2; p += threads) {
        float acc = 0.0f;
        for (int64_t col = 0; col < dv; ++col) acc += red[col * R + p];
        if (p < dk)
          dq[row * dk + p] = acc;
        else if (p < 2 * dk)
          dk_out[row * dk + p - dk] = acc;
        else if (p == 2 * dk)
          d_beta[row] = acc;
        else
          d_alpha[row] = acc;
      }
      __syncthreads();  // summed: the next token may overwrite the partials
    }
  }
}

// One token a slice, a thread per column of the state (in global memory).
__global__ void delta_rule_step_kernel(int64_t dk, int64_t dv, float* state, const float* q, const float* k,
                                       const float* v, const float* beta, const float* alpha, float* out,
                                       bool erase) {
  const int64_t b = blockIdx.x, j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= dv) return;
  float* col = state + b * dk * dv + j;
  write_token(col, dv, k + b * dk, v[b * dv + j], beta[b], alpha[b], dk, erase);
  out[b * dv + j] = column_dot(col, dv, q + b * dk, dk);
}

void check_dims(const char* op, const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  TARN_CHECK(d.slices >= 0 && d.n >= 0 && d.dk > 0 && d.dv > 0, op, ": bad dims slices ", d.slices, " n ", d.n,
             " dk ", d.dk, " dv ", d.dv);
  TARN_CHECK(cfg.chunk >= 1, op, ": chunk must be >= 1, got ", cfg.chunk);
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
  TARN_CHECK(d.slices <= kMaxGridX, op, ": ", d.slices, " slices exceed one grid");
}

// kernels/delta_rule.h's delta_rule_checkpoints (the CPU library is not linked here): the states
// before tokens chunk, 2 chunk, ... (the first chunk starts from zero).
int64_t checkpoints_per_slice(const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  return std::max<int64_t>(0, (d.n + cfg.chunk - 1) / cfg.chunk - 1);
}

unsigned column_tiles(int64_t dv) { return static_cast<unsigned>((dv + kColumnsPerWarp - 1) / kColumnsPerWarp); }

// Opts the kernel in to `bytes` of dynamic shared memory when that is above the default 48 KiB,
// or says which dims need too much.
template <typename Kernel>
void reserve_shared(const char* op, Kernel kernel, size_t bytes, const DeltaRuleDims& d) {
  if (bytes <= 48 * 1024) return;  // no opt-in needed
  TARN_CHECK(bytes <= static_cast<size_t>(device::max_dynamic_smem()), op, ": dk ", d.dk, " dv ", d.dv, " need ",
             bytes, " bytes of shared memory a block, above the device's ", device::max_dynamic_smem());
  device::allow_dynamic_smem(kernel, bytes);
}

// delta_rule_set_algorithm's choice.
std::atomic<DeltaRuleAlgorithm> g_algorithm{DeltaRuleAlgorithm::automatic};

// The sub-chunk the scans of these dims run chunked with, or 0 for the recurrence (chunked
// forced: it must fit, or the call throws).
int64_t chunked_sub_chunk(const char* op, const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  const DeltaRuleAlgorithm a = g_algorithm.load();
  if (a == DeltaRuleAlgorithm::recurrent) return 0;
  const int64_t c = delta_chunked::sub_chunk(d, cfg);
  TARN_CHECK(c > 0 || a == DeltaRuleAlgorithm::automatic, op, ": dk ", d.dk, " dv ", d.dv,
             " do not fit the chunked kernels' shared memory");
  return c;
}

}  // namespace

void delta_rule_set_algorithm(DeltaRuleAlgorithm algorithm) { g_algorithm.store(algorithm); }

int64_t delta_rule_sub_chunk(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  return delta_chunked::sub_chunk(dims, cfg);
}

// Enough for either algorithm, so that a workspace sized before delta_rule_set_algorithm serves
// after it.
size_t delta_rule_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t longest = std::min(cfg.chunk, dims.n);  // tokens of the longest chunk
  const size_t recurrent = static_cast<size_t>(dims.slices * (longest + 1) * dims.dk * dims.dv);
  const int64_t c = delta_chunked::sub_chunk(dims, cfg);
  return c > 0 ? std::max(recurrent, delta_chunked::backward_workspace_floats(dims, cfg, c)) : recurrent;
}

void delta_rule_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                        const float* v, const float* beta, const float* alpha, float* out, float* final_state,
                        float* checkpoints) {
  const char* op = "delta_rule_forward";
  check_dims(op, dims, cfg);
  TARN_CHECK((q == nullptr) == (out == nullptr), op, ": q and out go together");
  if (dims.slices == 0) return;
  if (const int64_t c = chunked_sub_chunk(op, dims, cfg))
    return delta_chunked::forward(dims, cfg, c, q, k, v, beta, alpha, out, final_state, checkpoints,
                                  checkpoints_per_slice(dims, cfg));
  const size_t smem = static_cast<size_t>(dims.dk) * kColumnsPerWarp * sizeof(float);
  reserve_shared(op, delta_rule_forward_kernel, smem, dims);
  const dim3 grid(static_cast<unsigned>(dims.slices), column_tiles(dims.dv));
  tarn::launch(delta_rule_forward_kernel, grid, kColumnsPerWarp, smem, nullptr, dims, cfg, q, k, v, beta, alpha, out,
               final_state, checkpoints, checkpoints_per_slice(dims, cfg));
}

void delta_rule_backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                         const float* v, const float* beta, const float* alpha, const float* checkpoints,
                         const float* d_out, const float* d_final_state, float* dq, float* dk, float* dv,
                         float* d_beta, float* d_alpha, float* workspace, size_t workspace_floats) {
  const char* op = "delta_rule_backward";
  check_dims(op, dims, cfg);
  TARN_CHECK((q == nullptr) == (d_out == nullptr) && (q == nullptr) == (dq == nullptr), op,
             ": q, d_out and dq go together");
  TARN_CHECK(workspace_floats >= TARN_CUDA_NS::delta_rule_backward_workspace_floats(dims, cfg), op, ": workspace too small");
  if (dims.slices == 0 || dims.n == 0) return;  // no rows to write
  if (const int64_t c = chunked_sub_chunk(op, dims, cfg))
    return delta_chunked::backward(dims, cfg, c, q, k, v, beta, alpha, checkpoints, d_out, d_final_state, dq, dk,
                                   dv, d_beta, d_alpha, workspace, checkpoints_per_slice(dims, cfg));
  TARN_CHECK(dims.dv <= kMaxColumns, op, ": dv ", dims.dv, " is above the ", kMaxColumns, " columns a block holds");
  const int64_t threads = static_cast<int64_t>(column_tiles(dims.dv)) * kColumnsPerWarp;
  const size_t smem = static_cast<size_t>(threads * (dims.dk + reduction_stride(dims.dk))) * sizeof(float);
  reserve_shared(op, delta_rule_backward_kernel, smem, dims);
  tarn::launch(delta_rule_backward_kernel, static_cast<unsigned>(dims.slices), static_cast<unsigned>(threads), smem,
               nullptr, dims, cfg, q, k, v, beta, alpha, checkpoints, d_out, d_final_state, dq, dk, dv, d_beta,
               d_alpha, workspace, checkpoints_per_slice(dims, cfg));
}

void delta_rule_step(int64_t slices, int64_t dk, int64_t dv, float* state, const float* q, const float* k,
                     const float* v, const float* beta, const float* alpha, float* out, bool erase) {
  check_dims("delta_rule_step", {slices, 1, dk, dv}, DeltaRuleConfig{});
  if (slices == 0) return;
  const dim3 grid(static_cast<unsigned>(slices), column_tiles(dv));
  tarn::launch(delta_rule_step_kernel, grid, kColumnsPerWarp, 0, nullptr, dk, dv, state, q, k, v, beta, alpha, out,
               erase);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
