// Routed cross-attention's chunk kernels on CUDA (kernels/chunk_attention.h,
// kernels/cuda_chunk_attention.h), all on the device so that a routed step never waits for the
// host:
//   chunk_mean      a thread per element of the means (the chunk's rows in order, then / count),
//                   and per element of dx;
//   chunk_choose    a thread per score row, an insertion list of the best `top` chunks;
//   forward, dq     a warp per query row: the lanes score the row's top x chunk keys into shared
//                   memory, the warp reduces max and sum, then each lane sums its columns of
//                   the output over the keys in the CPU's order (chosen chunk by chunk); with
//                   `picked`, lane 0 first walks the row's scores, parent by parent, into an
//                   insertion list of the best `pick` (equal scores: the lower row);
//   dk, dv          a block per (head, chunk): warp 0 lists, 32 queries at a time, those that
//                   chose the chunk (a ballot keeps them in order), then the block adds each
//                   listed query's terms into the chunk's rows in shared memory, query by query
//                   as the CPU does: no atomics, the same bits on every run.
// Work: O(BH nq top chunk d) for the reads and O(BH nq top) for the listing scans' compares.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_chunk_attention.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::ChunkAttentionDims;

constexpr int kRowsPerBlock = 4;          // query rows (warps) per block of the forward and dq
constexpr int kListThreads = 128;         // threads per block of the dk, dv pass
constexpr int64_t kMaxChunkTile = 4096;   // chunk x d: the dk, dv pass keeps both in shared memory

__device__ __forceinline__ bool hidden(const float* padded, int64_t b, int64_t nk, int64_t j) {
  return padded != nullptr && padded[b * nk + j] != 0.0f;
}

__device__ __forceinline__ int64_t visible_rows(const ChunkAttentionDims& s, const float* padded, int64_t b,
                                                int64_t c) {
  const int64_t begin = c * s.chunk, end = begin + s.chunk < s.nk ? begin + s.chunk : s.nk;
  int64_t kept = 0;
  for (int64_t j = begin; j < end; ++j) kept += !hidden(padded, b, s.nk, j);
  return kept;
}

// The key row of slot `slot` (= t chunk + row in chunk) of a query's chosen chunks, or -1 when
// the chunk is none, the row past the source, or padding.
__device__ __forceinline__ int64_t slot_key(const ChunkAttentionDims& s, const float* chosen_row,
                                            const float* padded, int64_t b, int64_t slot) {
  const int64_t c = static_cast<int64_t>(chosen_row[slot / s.chunk]);
  if (c < 0 || c >= s.chunks()) return -1;
  const int64_t j = c * s.chunk + slot % s.chunk;
  return j < s.nk && !hidden(padded, b, s.nk, j) ? j : -1;
}

// a · b over d elements: each lane a strided share, then the warp's sum (every lane gets it).
__device__ __forceinline__ float warp_dot(const float* a, const float* b, int64_t d) {
  float acc = 0.0f;
  for (int64_t e = threadIdx.x % device::kWarp; e < d; e += device::kWarp) acc += a[e] * b[e];
  return device::warp_reduce(acc, device::Sum());
}

__global__ void chunk_mean_kernel(ChunkAttentionDims s, const float* x, const float* padded, float* mean,
                                  float* empty) {
  const int64_t nc = s.chunks(), total = s.batch * s.heads * nc * s.d;
  for (int64_t idx = device::global_index(); idx < total; idx += device::global_stride()) {
    const int64_t e = idx % s.d, c = (idx / s.d) % nc, bh = idx / (s.d * nc), b = bh / s.heads;
    float acc = 0.0f;
    for (int64_t j = c * s.chunk; j < (c + 1) * s.chunk && j < s.nk; ++j)
      if (!hidden(padded, b, s.nk, j)) acc += x[(bh * s.nk + j) * s.d + e];
    const int64_t kept = visible_rows(s, padded, b, c);
    mean[idx] = kept > 0 ? acc / static_cast<float>(kept) : 0.0f;
    if (bh % s.heads == 0 && e == 0) empty[b * nc + c] = kept == 0 ? 1.0f : 0.0f;
  }
}

__global__ void chunk_mean_backward_kernel(ChunkAttentionDims s, const float* padded, const float* dmean,
                                           float* dx) {
  const int64_t nc = s.chunks(), total = s.batch * s.heads * s.nk * s.d;
  for (int64_t idx = device::global_index(); idx < total; idx += device::global_stride()) {
    const int64_t e = idx % s.d, j = (idx / s.d) % s.nk, bh = idx / (s.d * s.nk), b = bh / s.heads, c = j / s.chunk;
    dx[idx] = hidden(padded, b, s.nk, j)
                  ? 0.0f
                  : dmean[(bh * nc + c) * s.d + e] / static_cast<float>(visible_rows(s, padded, b, c));
  }
}

// The best k of a stream of (score, index) candidates, best first: a higher score, or an equal
// one from a lower index, the rule of the CPU's kernels/cpu/best_of.h (chunk_choose offers its
// chunks in ascending order, so there an equal score never displaces an earlier chunk). An
// insertion list of at most kChunkMaxTop in one thread.
struct BestOfList {
  int64_t k, count = 0;
  float best[kChunkMaxTop];
  int64_t index[kChunkMaxTop];

  __device__ explicit BestOfList(int64_t k_) : k(k_) {}
  __device__ bool beats(float v, int64_t j, int64_t at) const {
    return v > best[at] || (v == best[at] && j < index[at]);
  }
  __device__ void offer(float v, int64_t j) {
    if (count == k && !beats(v, j, count - 1)) return;
    int64_t at = count < k ? count++ : k - 1;
    for (; at > 0 && beats(v, j, at - 1); --at) {
      best[at] = best[at - 1];
      index[at] = index[at - 1];
    }
    best[at] = v;
    index[at] = j;
  }
  // out[0, k): the kept indices, best first, then -1.
  __device__ void write(float* out) const {
    for (int64_t t = 0; t < k; ++t) out[t] = t < count ? static_cast<float>(index[t]) : -1.0f;
  }
};

__global__ void chunk_choose_kernel(ChunkAttentionDims s, const float* scores, const float* empty, float* chosen) {
  const int64_t nc = s.chunks(), rows = s.batch * s.heads * s.nq;
  for (int64_t r = device::global_index(); r < rows; r += device::global_stride()) {
    const float* row = scores + r * nc;
    const float* flags = empty != nullptr ? empty + (r / (s.heads * s.nq)) * nc : nullptr;
    BestOfList list(s.top);
    for (int64_t c = 0; c < nc; ++c)
      if (flags == nullptr || flags[c] == 0.0f) list.offer(row[c], c);
    list.write(chosen + r * s.top);
  }
}

// Shared memory of a warp-per-row pass: per warp, a value and a key row (-1: none) per slot;
// 8 bytes a slot, 32 KiB at kChunkMaxKeys slots a warp.
struct RowScratch {
  float* value;
  int32_t* key;
};

__device__ __forceinline__ RowScratch row_scratch(int64_t slots) {
  TARN_DYNAMIC_SHARED(float, values);
  const int warp = threadIdx.x / device::kWarp;
  int32_t* keys = reinterpret_cast<int32_t*>(values + kRowsPerBlock * slots);
  return {values + warp * slots, keys + warp * slots};
}

size_t row_smem_bytes(int64_t slots) {
  return static_cast<size_t>(kRowsPerBlock * slots) * (sizeof(float) + sizeof(int32_t));
}

// The best `pick` of a row's scored keys (scratch, slot order: parent by parent, rows ascending)
// into picked_row.
__device__ void choose_within(const RowScratch& scratch, int64_t slots, int64_t pick, float* picked_row) {
  BestOfList list(pick);
  for (int64_t slot = 0; slot < slots; ++slot)
    if (scratch.key[slot] >= 0) list.offer(scratch.value[slot], scratch.key[slot]);
  list.write(picked_row);
}

__global__ void chunk_attention_forward_kernel(ChunkAttentionDims s, const float* q, const float* k, const float* v,
                                               const float* chosen, const float* padded, float scale, float* out,
                                               float* lse, int64_t pick, float* picked) {
  const int64_t slots = s.top * s.chunk, rows = s.batch * s.heads * s.nq;
  const RowScratch scratch = row_scratch(slots);
  const int lane = threadIdx.x % device::kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / device::kWarp;
  if (r >= rows) return;  // a whole warp: no barrier below spans warps
  const int64_t bh = r / s.nq, b = bh / s.heads, d = s.d;
  const float *qi = q + r * d, *kh = k + bh * s.nk * d, *vh = v + bh * s.nk * d;
  float m = -INFINITY;
  for (int64_t slot = 0; slot < slots; ++slot) {  // the warp scores slot by slot
    const int64_t j = slot_key(s, chosen + r * s.top, padded, b, slot);
    const float score = j < 0 ? -INFINITY : scale * warp_dot(qi, kh + j * d, d);
    if (lane == 0) {
      scratch.value[slot] = score;
      scratch.key[slot] = static_cast<int32_t>(j);
    }
    m = fmaxf(m, score);
  }
  __syncwarp();
  if (picked != nullptr && lane == 0) choose_within(scratch, slots, pick, picked + r * pick);
  float* oi = out + r * d;
  if (m == -INFINITY) {  // no visible key: zeros
    for (int64_t e = lane; e < d; e += device::kWarp) oi[e] = 0.0f;
    if (lane == 0) lse[r] = -INFINITY;
    return;
  }
  float z = 0.0f;
  for (int64_t slot = 0; slot < slots; ++slot)
    if (scratch.key[slot] >= 0) z += expf(scratch.value[slot] - m);
  for (int64_t e = lane; e < d; e += device::kWarp) {
    float acc = 0.0f;
    for (int64_t slot = 0; slot < slots; ++slot) {
      const int32_t j = scratch.key[slot];
      if (j >= 0) acc += expf(scratch.value[slot] - m) * vh[j * d + e];
    }
    oi[e] = acc / z;
  }
  if (lane == 0) lse[r] = m + logf(z);
}

// dq_i = scale Σ_j P_ij (dP_ij - D_i) k_j with D_i = dout_i · out_i.
__global__ void chunk_attention_dq_kernel(ChunkAttentionDims s, const float* q, const float* k, const float* v,
                                          const float* chosen, const float* padded, float scale, const float* out,
                                          const float* lse, const float* dout, float* dq) {
  const int64_t slots = s.top * s.chunk, rows = s.batch * s.heads * s.nq;
  const RowScratch scratch = row_scratch(slots);
  const int lane = threadIdx.x % device::kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / device::kWarp;
  if (r >= rows) return;
  const int64_t bh = r / s.nq, b = bh / s.heads, d = s.d;
  const float *qi = q + r * d, *gi = dout + r * d, *kh = k + bh * s.nk * d, *vh = v + bh * s.nk * d;
  float* dqi = dq + r * d;
  const float li = lse[r];
  if (isinf(li)) {  // no visible key: the zeros have no gradient
    for (int64_t e = lane; e < d; e += device::kWarp) dqi[e] = 0.0f;
    return;
  }
  const float di = warp_dot(gi, out + r * d, d);
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int64_t j = slot_key(s, chosen + r * s.top, padded, b, slot);
    float ds = 0.0f;
    if (j >= 0) {
      const float p = expf(scale * warp_dot(qi, kh + j * d, d) - li);
      ds = p * (warp_dot(gi, vh + j * d, d) - di) * scale;
    }
    if (lane == 0) {
      scratch.value[slot] = ds;
      scratch.key[slot] = static_cast<int32_t>(j);
    }
  }
  __syncwarp();
  for (int64_t e = lane; e < d; e += device::kWarp) {
    float acc = 0.0f;
    for (int64_t slot = 0; slot < slots; ++slot)
      if (scratch.key[slot] >= 0) acc += scratch.value[slot] * kh[scratch.key[slot] * d + e];
    dqi[e] = acc;
  }
}

// dv_j = Σ_i P_ij dout_i and dk_j = Σ_i dS_ij q_i over the queries i that chose j's chunk, in
// query order: a block per (head, chunk), grid (chunks, BH).
__global__ void chunk_attention_dkdv_kernel(ChunkAttentionDims s, const float* q, const float* k, const float* v,
                                            const float* chosen, const float* padded, float scale, const float* out,
                                            const float* lse, const float* dout, float* dk, float* dv) {
  __shared__ int64_t listed[device::kWarp];
  __shared__ int listed_count;
  __shared__ float di_shared;
  TARN_DYNAMIC_SHARED(float, smem);
  const int64_t c = blockIdx.x, bh = blockIdx.y, b = bh / s.heads, d = s.d;
  const int64_t begin = c * s.chunk, rows_in_chunk = s.nk - begin < s.chunk ? s.nk - begin : s.chunk, tile = rows_in_chunk * d;
  float* acc_dk = smem;                  // (rows_in_chunk, d)
  float* acc_dv = acc_dk + s.chunk * d;  // (rows_in_chunk, d)
  float* p_row = acc_dv + s.chunk * d;   // (rows_in_chunk): P_ij of the query in hand
  float* dp_row = p_row + s.chunk;       // (rows_in_chunk): dP_ij
  const int lane = threadIdx.x % device::kWarp, warp = threadIdx.x / device::kWarp, warps = blockDim.x / device::kWarp;
  for (int64_t x = threadIdx.x; x < tile; x += blockDim.x) acc_dk[x] = acc_dv[x] = 0.0f;
  const float *kh = k + bh * s.nk * d, *vh = v + bh * s.nk * d;
  for (int64_t base = 0; base < s.nq; base += device::kWarp) {
    if (warp == 0) {
      const int64_t i = base + lane;
      bool hit = false;
      if (i < s.nq && !isinf(lse[bh * s.nq + i]))
        for (int64_t t = 0; t < s.top; ++t) hit |= chosen[(bh * s.nq + i) * s.top + t] == static_cast<float>(c);
      const unsigned mask = __ballot_sync(device::kFullMask, hit);
      if (hit) listed[__popc(mask & ((1u << lane) - 1u))] = i;
      if (lane == 0) listed_count = __popc(mask);
    }
    __syncthreads();
    const int hits = listed_count;
    for (int h = 0; h < hits; ++h) {
      const int64_t row = bh * s.nq + listed[h];
      const float *qi = q + row * d, *gi = dout + row * d;
      const float li = lse[row];
      // items 0..rows_in_chunk-1: the chunk's rows; item rows_in_chunk: D_i
      for (int64_t item = warp; item <= rows_in_chunk; item += warps) {
        if (item == rows_in_chunk) {
          const float di = warp_dot(gi, out + row * d, d);
          if (lane == 0) di_shared = di;
          continue;
        }
        const int64_t j = begin + item;
        float p = 0.0f, dp = 0.0f;
        if (!hidden(padded, b, s.nk, j)) {
          p = expf(scale * warp_dot(qi, kh + j * d, d) - li);
          dp = warp_dot(gi, vh + j * d, d);
        }
        if (lane == 0) {
          p_row[item] = p;
          dp_row[item] = dp;
        }
      }
      __syncthreads();
      const float di = di_shared;
      for (int64_t x = threadIdx.x; x < tile; x += blockDim.x) {
        const int64_t item = x / d, e = x % d;
        const float p = p_row[item], ds = p * (dp_row[item] - di) * scale;
        acc_dv[x] += p * gi[e];
        acc_dk[x] += ds * qi[e];
      }
      __syncthreads();
    }
    __syncthreads();  // warp 0 rewrites the list only after every thread has read the count
  }
  for (int64_t x = threadIdx.x; x < tile; x += blockDim.x) {
    const int64_t at = (bh * s.nk + begin) * d + x;
    if (dk != nullptr) dk[at] = acc_dk[x];
    if (dv != nullptr) dv[at] = acc_dv[x];
  }
}

void check(const ChunkAttentionDims& s, const char* what) {
  TARN_CHECK(s.batch >= 0 && s.heads >= 1 && s.nq >= 0 && s.nk >= 0 && s.d >= 0 && s.chunk >= 1 && s.top >= 1, what,
             ": bad dims batch ", s.batch, " heads ", s.heads, " nq ", s.nq, " nk ", s.nk, " d ", s.d, " chunk ",
             s.chunk, " top ", s.top);
  TARN_CHECK(s.top <= kChunkMaxTop, what, ": top ", s.top, " above the ", kChunkMaxTop, " chunks CUDA chooses");
  TARN_CHECK(s.nk < (int64_t{1} << 31), what, ": ", s.nk, " keys: their rows are int32 in shared memory");
}

void check_reads(const ChunkAttentionDims& s, const char* what) {
  check(s, what);
  TARN_CHECK(s.top * s.chunk <= kChunkMaxKeys, what, ": top ", s.top, " x chunk ", s.chunk, " keys above the ",
             kChunkMaxKeys, " a query reads on CUDA");
}

unsigned row_blocks(const ChunkAttentionDims& s) {
  return static_cast<unsigned>((s.batch * s.heads * s.nq + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void chunk_mean_forward(const ChunkAttentionDims& s, const float* x, const float* padded, float* mean, float* empty) {
  check(s, "chunk_mean");
  const int64_t total = s.batch * s.heads * s.chunks() * s.d;
  if (total == 0) return;
  tarn::launch(chunk_mean_kernel, device::grid_for(total), device::kBlock, 0, nullptr, s, x, padded, mean, empty);
}

void chunk_mean_backward(const ChunkAttentionDims& s, const float* padded, const float* dmean, float* dx) {
  check(s, "chunk_mean");
  const int64_t total = s.batch * s.heads * s.nk * s.d;
  if (total == 0) return;
  tarn::launch(chunk_mean_backward_kernel, device::grid_for(total), device::kBlock, 0, nullptr, s, padded, dmean, dx);
}

void chunk_choose(const ChunkAttentionDims& s, const float* scores, const float* empty, float* chosen) {
  check(s, "chunk_choose");
  const int64_t rows = s.batch * s.heads * s.nq;
  if (rows == 0) return;
  tarn::launch(chunk_choose_kernel, device::grid_for(rows), device::kBlock, 0, nullptr, s, scores, empty, chosen);
}

void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                             const float* chosen, const float* padded, float scale, float* out, float* lse,
                             int64_t pick, float* picked) {
  check_reads(s, "chunk_attention");
  TARN_CHECK(picked == nullptr || (pick >= 1 && pick <= kChunkMaxTop), "chunk_attention: pick ", pick,
             " outside [1, ", kChunkMaxTop, "] on CUDA");
  if (s.batch * s.heads * s.nq == 0) return;
  tarn::launch(chunk_attention_forward_kernel, row_blocks(s), kRowsPerBlock * device::kWarp,
               row_smem_bytes(s.top * s.chunk), nullptr, s, q, k, v, chosen, padded, scale, out, lse, pick, picked);
}

void chunk_attention_backward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                              const float* chosen, const float* padded, float scale, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  check_reads(s, "chunk_attention");
  TARN_CHECK(s.chunk * s.d <= kMaxChunkTile, "chunk_attention: chunk ", s.chunk, " x d ", s.d, " above the ",
             kMaxChunkTile, " values of a chunk the CUDA backward keeps in shared memory");
  if (dq != nullptr && s.batch * s.heads * s.nq > 0)
    tarn::launch(chunk_attention_dq_kernel, row_blocks(s), kRowsPerBlock * device::kWarp,
                 row_smem_bytes(s.top * s.chunk), nullptr, s, q, k, v, chosen, padded, scale, out, lse, dout, dq);
  if ((dk != nullptr || dv != nullptr) && s.batch * s.heads * s.chunks() > 0) {
    TARN_CHECK(s.batch * s.heads <= device::kMaxGridY, "chunk_attention: ", s.batch * s.heads,
               " heads x batch exceed one grid");
    const size_t smem = static_cast<size_t>(2 * s.chunk * s.d + 2 * s.chunk) * sizeof(float);
    tarn::launch(chunk_attention_dkdv_kernel, dim3(static_cast<unsigned>(s.chunks()), static_cast<unsigned>(s.batch * s.heads)),
                 kListThreads, smem, nullptr, s, q, k, v, chosen, padded, scale, out, lse, dout, dk, dv);
  }
}

}  // namespace tarn::kernels::TARN_CUDA_NS
