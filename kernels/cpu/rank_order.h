#pragma once
// The one reduction order of every communicator (kernels/collectives.h): element i of the result
// is ((p_0[i] op p_1[i]) op p_2[i]) op ... in rank order. The thread group, the MPI communicator
// and NCCL's host reductions all reduce through reduce_in_rank_order, so they agree bit for bit.
#include <cstdint>
#include <cstring>

#include "kernels/collectives.h"

namespace tarn::kernels::cpu {

// a op b. max/min keep the earlier rank's value on ties and when b is NaN (std::max's rule).
template <typename T>
inline T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::sum: return a + b;
    case ReduceOp::max: return a < b ? b : a;
    case ReduceOp::min: return b < a ? b : a;
  }
  return a;
}

// out[i] <- part(0)[i] op part(1)[i] op ... op part(world - 1)[i], i < n, left to right. part(r)
// returns rank r's n values; out must not overlap any of them (except being part(0) itself).
template <typename T, typename Part>
void reduce_in_rank_order(T* out, int64_t n, int world, const Part& part, ReduceOp op) {
  if (n <= 0) return;
  const T* first = part(0);
  if (first != out) std::memcpy(out, first, static_cast<size_t>(n) * sizeof(T));
  // Rank-major loops: the inner loop vectorises across i; the order per element is unchanged.
  for (int r = 1; r < world; ++r) {
    const T* src = part(r);
    switch (op) {
      case ReduceOp::sum:
        for (int64_t i = 0; i < n; ++i) out[i] += src[i];
        break;
      case ReduceOp::max:
        for (int64_t i = 0; i < n; ++i) out[i] = combine(ReduceOp::max, out[i], src[i]);
        break;
      case ReduceOp::min:
        for (int64_t i = 0; i < n; ++i) out[i] = combine(ReduceOp::min, out[i], src[i]);
        break;
    }
  }
}

inline const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

}  // namespace tarn::kernels::cpu
