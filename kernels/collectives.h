#pragma once
// Collectives for data-parallel training (docs/design.md section 1: "gradients all-reduced across
// ranks"): a Communicator is one rank's handle on a group of `world` ranks. Two
// implementations behind one interface:
//   cpu::thread_communicators(world)   ranks are threads of this process sharing memory
//                                      (kernels/cpu/collectives.cpp): the CPU backend's and the
//                                      emulated build's, and the reference the tests use
//   cuda::nccl_communicator(...)       NCCL over GPUs, one rank per device
//                                      (kernels/cuda/collectives.cu; only when NCCL was found)
// Every call is collective: each rank of the group makes the same calls in the same order,
// with the same n (and root), each from its own thread; a rank that never calls blocks the
// others forever, as with MPI and NCCL. Calls return when the result is in the caller's buffer.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda_api.h"

namespace tarn::kernels {

// How all_reduce_host combines the ranks' values.
enum class ReduceOp { sum, max, min };

// A collective started by Communicator::start_all_reduce_sum that runs on while its caller
// computes. The communicator must outlive it.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Moves the collective on without blocking (MPI transfers progress only inside MPI calls);
  // true once it is complete.
  virtual bool test() = 0;
  // Returns once it is complete. For device memory (NCCL) once the device's later work is
  // ordered after it: kernels launched afterwards see the result, without the host waiting.
  virtual void wait() = 0;
};

// What a communicator that cannot overlap returns: a collective already complete.
class CompletedCollective final : public PendingCollective {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual const char* backend() const = 0;  // "cpu-threads", "mpi", "nccl"

  // data[i] <- sum over ranks r of data_r[i], i < n, in place on every rank. Summation order:
  // the CPU adds in rank order, ((d_0 + d_1) + d_2) + ..., in f32, every element and every
  // call the same (bit-reproducible); NCCL's order follows its ring/tree and may differ in
  // the last bits from the CPU's (but is the same from run to run on the same topology).
  // Every rank receives the same bits.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // send holds world() * n values, rank r's slice at send + r * n; recv (n values) <- the sum
  // over ranks of their slice rank(). In place when recv == send + rank() * n. Same summation
  // order as all_reduce_sum, so a reduce_scatter followed by an all_gather equals it bit for bit.
  virtual void reduce_scatter_sum(const float* send, float* recv, int64_t n) = 0;
  // recv (world() * n values) <- every rank's n values of send, rank r's at recv + r * n. In
  // place when send == recv + rank() * n.
  virtual void all_gather(const float* send, float* recv, int64_t n) = 0;
  // data[i] <- data_root[i], i < n, on every rank.
  virtual void broadcast(float* data, int64_t n, int root) = 0;

  // all_reduce_sum(data, n), the same bits, started now and finished while the caller goes on
  // where the backend can (MPI: non-blocking calls that test() moves on; NCCL: a stream of its
  // own); the others finish it before returning. Nobody touches data until it is complete.
  // Every rank starts the same collectives in the same order; they complete in that order, and
  // every blocking call of this communicator completes them all first.
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) {
    all_reduce_sum(data, n);
    return std::make_unique<CompletedCollective>();
  }

  // reduce_scatter_sum and all_gather, the same bits, started now. NCCL queues them on its
  // stream and returns: wait() orders the device's later work after them, so the host waits for
  // nothing. The others complete them before returning (their blocking calls). Nobody touches
  // send or recv until wait() returns (on the device: before the work launched after it).
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv, int64_t n) {
    reduce_scatter_sum(send, recv, n);
    return std::make_unique<CompletedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_all_gather(const float* send, float* recv, int64_t n) {
    all_gather(send, recv, n);
    return std::make_unique<CompletedCollective>();
  }

  // Control values in host memory, whatever the communicator's device: token counts, flags,
  // loss sums, checksums. Sums add in rank order in double, so every rank gets the same bits.
  virtual void all_reduce_host(double* data, int64_t n, ReduceOp op) = 0;
  // Host bytes from root to every rank (NCCL's unique id, a checkpoint's name).
  virtual void broadcast_host_bytes(void* data, int64_t bytes, int root) = 0;

  // Returns once every rank has entered it.
  virtual void barrier() = 0;
};

// One rank alone: every call returns at once (reduce_scatter and all_gather copy when not in
// place). What a plain, unlaunched `tarn train` uses, so that it communicates nothing.
std::unique_ptr<Communicator> solo_communicator();

namespace cpu {

// The `world` ranks of one group, rank r at index r. Give each to its own thread.
std::vector<std::unique_ptr<Communicator>> thread_communicators(int world);

}  // namespace cpu

// What NCCL needs to form a group across processes: made by rank 0 (nccl_unique_id) and sent
// to the others by any means (MPI, a file); NCCL_UNIQUE_ID_BYTES bytes.
using NcclUniqueId = std::array<char, 128>;

}  // namespace tarn::kernels

// kernels/cuda/collectives.cu, in both namespaces of the CUDA backend (kernels/cuda_kernels.h):
//   nccl_available()        NCCL was found at configure time (cuda) / never (cuda_emu)
//   nccl_unique_id(), nccl_communicator(id, rank, world, device)
//                           one rank per process (ncclGetUniqueId, ncclCommInitRank); throw
//                           when NCCL is not available
//   local_communicators(world)
//                           every rank in this process, rank r on device r (ncclCommInitAll);
//                           the emulated build returns cpu::thread_communicators(world), as its
//                           "devices" are host memory, whose start_all_reduce_sum answers with
//                           the device's event-based pending type (kernels/cuda/stream_pending.cuh)
#define TARN_COLLECTIVES_CUDA_API                                                                 \
  bool nccl_available();                                                                          \
  NcclUniqueId nccl_unique_id();                                                                  \
  std::unique_ptr<Communicator> nccl_communicator(const NcclUniqueId& id, int rank, int world, int device); \
  std::vector<std::unique_ptr<Communicator>> local_communicators(int world);

TARN_DECLARE_CUDA_API(TARN_COLLECTIVES_CUDA_API)

#undef TARN_COLLECTIVES_CUDA_API
