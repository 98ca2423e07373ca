#pragma once
// Softmax (scaled dot-product) attention, the baseline linear attention is measured against.
//
//   q: (B, H, Nq, d)   k: (B, H, Nk, d)   v: (B, H, Nk, e)
//   out: (B, H, Nq, e) lse: (B, H, Nq)    key_padding_mask: (B, Nk)
//
//   out_i = sum_j softmax_j(scale * q_i . k_j over visible j) v_j,  scale = 1/sqrt(d) by default
//
// Visible: not padded (mask == 0), when causal (Nq == Nk) j <= i, and with a window w > 0
// (sliding-window attention) j in (i - w, i] when causal, |i - j| <= w / 2 when not (visible_keys
// below). The bidirectional window also takes Nq != Nk: query i then sees the keys at positions
// within w / 2 of its own (cross-attention around the diagonal, Luong et al. 2015's local-m). A
// query that sees no key gets out = 0 and lse = +inf (so that backward's exp(s - lse) is 0 for
// it).
//
// Blocked as FlashAttention (Dao et al. 2022): the forward streams key blocks past a block
// of queries with an online softmax and keeps only lse = m + log(l) per query; backward
// recomputes the probabilities block by block from lse. No N x N matrix is ever stored:
// memory is the tensors plus O(block^2 + block (d + e)) per thread (and Nq floats per thread
// in backward), so N = 8192 with B*H = 8 runs anywhere the tensors fit.
// Forward is parallel over (batch, head, query block), backward over (batch, head). A window
// skips the key blocks no query of a block can see: time O(N w) instead of O(N^2).
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace tarn::kernels::cpu {

// Query and key rows per block when the caller leaves the choice to the kernel (block 0). A
// window of w keys makes a block of Bq queries read Bq + w keys, rounded out to whole key
// blocks: with 64-row blocks and w = 64 that is 128-192 keys per query row where 64 are seen.
// 32-row blocks read 96-128; measured on an AVX-512 EPYC (tarn bench attention --windows, N =
// 2,048, 4 heads of 64, forward+backward): 7.3-8.6 ms against 12.5-16.4 bidirectional at w = 64,
// 7-9 against 9-12 causal, level at w = 128, a little slower from w = 256, where the smaller
// tiles' overhead outweighs the keys saved.
constexpr int kDefaultSoftmaxBlock = 64;
constexpr int kWindowSoftmaxBlock = 32;
constexpr int64_t kSmallWindow = 128;
inline int default_softmax_block(int64_t window) {
  return window > 0 && window <= kSmallWindow ? kWindowSoftmaxBlock : kDefaultSoftmaxBlock;
}

struct SoftmaxAttentionDims {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t n_q = 0;
  int64_t n_k = 0;
  int64_t d = 0;
  int64_t e = 0;
};

struct SoftmaxAttentionConfig {
  bool causal = false;
  const float* key_padding_mask = nullptr;  // (batch, n_k), nonzero = padded; may be null
  float scale = 0.0f;                       // 0 means 1 / sqrt(d)
  int block_q = 0;                          // query rows per block; 0: default_softmax_block(window)
  int block_k = 0;                          // key rows per block; 0: the same
  // Sliding window: 0 = every key; w > 0: causal, the w keys j in (i - w, i]; bidirectional,
  // the keys with |i - j| <= w / 2 (also when Nq != Nk).
  int64_t window = 0;
};

// The keys query i may see before padding: [begin, end). One definition for the CPU and CUDA
// kernels and for the references the tests hold them to.
struct KeyRange {
  int64_t begin, end;
};
TARN_HOST_DEVICE KeyRange visible_keys(int64_t i, int64_t n_k, bool causal, int64_t window) {
  int64_t begin = 0, end = n_k;
  if (causal) end = i + 1;
  if (window > 0) {
    begin = causal ? i - window + 1 : i - window / 2;
    if (!causal) end = i + window / 2 + 1;
  }
  return {begin < 0 ? 0 : begin, end > n_k ? n_k : end};
}
// The queries that may see key j: [begin, end), the inverse of visible_keys (Nq == Nk when
// causal).
TARN_HOST_DEVICE KeyRange queries_seeing(int64_t j, int64_t n_q, bool causal, int64_t window) {
  int64_t begin = causal ? j : 0, end = n_q;
  if (window > 0) {
    begin = causal ? j : j - window / 2;
    end = causal ? j + window : j + window / 2 + 1;
  }
  return {begin < 0 ? 0 : begin, end > n_q ? n_q : end};
}
// The same rule as a band of offsets j - i in [lo, hi]: what a kernel tests per (query, key)
// pair with two compares (visible_keys(i) = [max(0, i + lo), min(n_k, i + hi + 1))).
struct OffsetBand {
  int64_t lo, hi;
};
TARN_HOST_DEVICE OffsetBand visible_offsets(bool causal, int64_t window) {
  constexpr int64_t kAll = int64_t{1} << 62;
  if (causal) return {window > 0 ? 1 - window : -kAll, 0};
  return window > 0 ? OffsetBand{-(window / 2), window / 2} : OffsetBand{-kAll, kAll};
}
// The keys some query of [i0, i0 + rows) may see, and the queries that may see some key of
// [j0, j0 + keys): both ends of visible_keys and queries_seeing never decrease with the index,
// so the block's first row bounds the beginning and its last (real) row the end. The blocked
// kernels visit only these, rounding the beginning down to their block.
TARN_HOST_DEVICE KeyRange keys_of_block(int64_t i0, int64_t rows, int64_t n_q, int64_t n_k, bool causal,
                                        int64_t window) {
  const int64_t last = (i0 + rows < n_q ? i0 + rows : n_q) - 1;
  return {visible_keys(i0, n_k, causal, window).begin, visible_keys(last, n_k, causal, window).end};
}
TARN_HOST_DEVICE KeyRange queries_of_block(int64_t j0, int64_t keys, int64_t n_q, int64_t n_k, bool causal,
                                           int64_t window) {
  const int64_t last = (j0 + keys < n_k ? j0 + keys : n_k) - 1;
  return {queries_seeing(j0, n_q, causal, window).begin, queries_seeing(last, n_q, causal, window).end};
}

size_t softmax_attention_forward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                  const SoftmaxAttentionConfig& cfg);
void softmax_attention_forward(const SoftmaxAttentionDims& dims,
                               const SoftmaxAttentionConfig& cfg, const float* q,
                               const float* k, const float* v, float* out, float* lse,
                               float* workspace, size_t workspace_floats);

size_t softmax_attention_backward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                   const SoftmaxAttentionConfig& cfg);
// dq, dk, dv (any may be null) from dout and the forward's out and lse. Overwrites.
void softmax_attention_backward(const SoftmaxAttentionDims& dims,
                                const SoftmaxAttentionConfig& cfg, const float* q,
                                const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv, float* workspace, size_t workspace_floats);

// 2 x multiply-adds of the visible (query, key) pairs: forward 2 pairs (d + e) (pairs = Nq Nk,
// about half when causal, about N w with a window), backward 2.5x that (S recomputed, dP, dV,
// dQ, dK).
double softmax_attention_flops(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg,
                               bool backward);

}  // namespace tarn::kernels::cpu
