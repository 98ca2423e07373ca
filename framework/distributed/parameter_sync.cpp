#include "framework/distributed/parameter_sync.h"

#include <cstring>

namespace tarn {

void broadcast_tensors(const std::vector<Tensor*>& tensors, kernels::Communicator& comm, int root) {
  if (comm.world() == 1) return;
  for (Tensor* t : tensors) {
    TARN_ASSERT(t->dtype() == DType::f32, "broadcast_tensors: only f32 tensors");
    comm.broadcast(t->device_f32(), t->numel(), root);
  }
}

uint64_t tensors_checksum(const std::vector<Tensor*>& tensors) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over 32-bit words: any flipped bit changes it
  for (const Tensor* t : tensors) {
    const std::vector<float> values = t->to_vector();
    for (float v : values) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      h = (h ^ bits) * 0x100000001b3ull;
    }
  }
  return h;
}

void check_replicas_identical(const std::vector<Tensor*>& tensors, kernels::Communicator& comm,
                              const std::string& what) {
  if (comm.world() == 1) return;
  const uint64_t mine = tensors_checksum(tensors);
  // Each rank fills its own two slots (the hash in 32-bit halves, exact in a double); the sum
  // hands every rank every rank's hash.
  std::vector<double> all(2 * static_cast<size_t>(comm.world()), 0.0);
  all[2 * comm.rank()] = static_cast<double>(mine >> 32);
  all[2 * comm.rank() + 1] = static_cast<double>(mine & 0xffffffffu);
  comm.all_reduce_host(all.data(), static_cast<int64_t>(all.size()), kernels::ReduceOp::sum);
  std::string differing;
  for (int r = 1; r < comm.world(); ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  TARN_ASSERT(differing.empty(), "data-parallel replicas drifted ", what, ": the parameters of rank(s) ", differing,
              " differ from rank 0's (a nondeterministic kernel, or ranks that disagreed on an update)");
}

}  // namespace tarn
