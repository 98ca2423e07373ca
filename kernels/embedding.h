#pragma once
// Embedding lookup and its backward. weight (vocab, dim); ids (n), each in [0, vocab) (the
// caller checks); out / dy (n, dim).
#include <cstdint>

namespace tarn::kernels::cpu {

// out[i] = weight[ids[i]]. Parallel over ids.
void embedding_forward(const float* weight, const int32_t* ids, float* out, int64_t n, int64_t vocab, int64_t dim);

// dweight (vocab, dim), overwritten: row v = sum of dy[i] over the positions i with ids[i] == v,
// added in increasing i; rows no id names are zero. Positions are bucketed by id with a
// counting sort and each row is summed by one thread: no atomics, no races, and the same bits
// for any thread count.
void embedding_backward(const float* dy, const int32_t* ids, float* dweight, int64_t n, int64_t vocab, int64_t dim);

}  // namespace tarn::kernels::cpu
