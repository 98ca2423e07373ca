// Collectives on GPUs through NCCL (kernels/collectives.h). nvcc's build uses NCCL when
// cmake/TarnCuda.cmake found it (TARN_WITH_NCCL); the emulated build's "devices" are host
// memory, so its communicators are the CPU's thread group behind the device's pending type. Every NCCL and CUDA call is checked
// and a failure throws tarn::Error naming the call.
#include "kernels/collectives.h"

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stream_pending.cuh"

#if defined(__CUDACC__) && defined(TARN_WITH_NCCL)
#define TARN_USE_NCCL 1
#include <nccl.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/rank_order.h"

// Checks an NCCL call; the message names the call, NCCL's reason and where it was made.
#define TARN_NCCL_CALL(call) TARN_CHECK_STATUS(call, #call, ncclSuccess, ncclGetErrorString)
#endif

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

#if defined(TARN_USE_NCCL)

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId), "NCCL_UNIQUE_ID_BYTES changed");

// One rank on one device. Work goes to a non-blocking stream of the communicator's own, made to
// wait (by an event) for the legacy default stream where the kernels put the gradients. The
// blocking calls synchronise before they return, so the host may read or reuse the buffer at
// once (the CPU group's contract). start_all_reduce_sum returns at once: the kernels launched
// after it on the default stream (the rest of the backward) run beside the reduction, and its
// wait() makes the default stream wait for it, without the host waiting.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, int device)
      : comm_(comm), rank_(rank), world_(world), device_(device) {
    TARN_CUDA_CALL(cudaSetDevice(device_));
    TARN_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TARN_CUDA_CALL(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
    TARN_CUDA_CALL(cudaMalloc(&token_, sizeof(float)));
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (scratch_) cudaFree(scratch_);
    if (token_) cudaFree(token_);
    if (inputs_ready_) cudaEventDestroy(inputs_ready_);
    if (stream_) cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const char* backend() const override { return "nccl"; }

  void all_reduce_sum(float* data, int64_t n) override {
    TARN_ASSERT(n >= 0, "all_reduce_sum: negative length ", n, " on rank ", rank_);
    after_default_stream();
    TARN_NCCL_CALL(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
  }

  // NCCL's in-place conventions are the interface's: recv == send + rank * n for
  // reduce-scatter, send == recv + rank * n for all-gather.
  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    TARN_ASSERT(n >= 0, "reduce_scatter_sum: negative length ", n, " on rank ", rank_);
    after_default_stream();
    TARN_NCCL_CALL(ncclReduceScatter(send, recv, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
  }

  void all_gather(const float* send, float* recv, int64_t n) override {
    TARN_ASSERT(n >= 0, "all_gather: negative length ", n, " on rank ", rank_);
    after_default_stream();
    TARN_NCCL_CALL(ncclAllGather(send, recv, static_cast<size_t>(n), ncclFloat32, comm_, stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
  }

  void broadcast(float* data, int64_t n, int root) override {
    TARN_ASSERT(n >= 0, "broadcast: negative length ", n, " on rank ", rank_);
    check_root("broadcast", root);
    after_default_stream();
    TARN_NCCL_CALL(ncclBroadcast(data, data, static_cast<size_t>(n), ncclFloat32, root, comm_, stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
  }

  // Host values go through device scratch. NCCL's own reduction order follows its ring or tree,
  // so instead every rank's values are all-gathered and each rank reduces them on the host in
  // rank order (kernels/cpu/rank_order.h): the thread group's bits, the same on every rank.
  // These are control values (counts, flags, loss sums), a few per step.
  void all_reduce_host(double* data, int64_t n, ReduceOp op) override {
    TARN_ASSERT(n >= 0, "all_reduce_host: negative length ", n, " on rank ", rank_);
    if (n == 0) return;
    const size_t bytes = static_cast<size_t>(n) * sizeof(double);
    char* scratch = device_scratch(bytes * (world_ + 1));
    after_default_stream();
    TARN_CUDA_CALL(cudaMemcpyAsync(scratch, data, bytes, cudaMemcpyHostToDevice, stream_));
    // As bytes: NCCL's all-gather only copies, so the values arrive bit for bit.
    TARN_NCCL_CALL(ncclAllGather(scratch, scratch + bytes, bytes, ncclUint8, comm_, stream_));
    host_gathered_.resize(static_cast<size_t>(n) * world_);
    TARN_CUDA_CALL(cudaMemcpyAsync(host_gathered_.data(), scratch + bytes, bytes * world_, cudaMemcpyDeviceToHost,
                                   stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
    cpu::reduce_in_rank_order(
        data, n, world_, [&](int r) { return host_gathered_.data() + static_cast<int64_t>(r) * n; }, op);
  }

  void broadcast_host_bytes(void* data, int64_t bytes, int root) override {
    TARN_ASSERT(bytes >= 0, "broadcast_host_bytes: negative length ", bytes, " on rank ", rank_);
    check_root("broadcast_host_bytes", root);
    if (bytes == 0) return;
    char* scratch = device_scratch(static_cast<size_t>(bytes));
    after_default_stream();
    if (rank_ == root)
      TARN_CUDA_CALL(cudaMemcpyAsync(scratch, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
    TARN_NCCL_CALL(ncclBroadcast(scratch, scratch, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_));
    if (rank_ != root)
      TARN_CUDA_CALL(cudaMemcpyAsync(data, scratch, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
  }

  // NCCL has no barrier: an all-reduce of one float completes only when every rank joined.
  void barrier() override {
    after_default_stream();
    TARN_NCCL_CALL(ncclAllReduce(token_, token_, 1, ncclFloat32, ncclSum, comm_, stream_));
    TARN_CUDA_CALL(cudaStreamSynchronize(stream_));
  }

  std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) override {
    TARN_ASSERT(n >= 0, "all_reduce_sum: negative length ", n, " on rank ", rank_);
    after_default_stream();
    TARN_NCCL_CALL(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream_));
    return std::make_unique<StreamPending>(stream_, device_);
  }

  // The training step's device collectives (the step records, ZeRO-1's shards and norm sums):
  // queued, and the default stream's later kernels ordered after them, with no host wait.
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    TARN_ASSERT(n >= 0, "reduce_scatter_sum: negative length ", n, " on rank ", rank_);
    after_default_stream();
    TARN_NCCL_CALL(ncclReduceScatter(send, recv, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream_));
    return std::make_unique<StreamPending>(stream_, device_);
  }

  std::unique_ptr<PendingCollective> start_all_gather(const float* send, float* recv, int64_t n) override {
    TARN_ASSERT(n >= 0, "all_gather: negative length ", n, " on rank ", rank_);
    after_default_stream();
    TARN_NCCL_CALL(ncclAllGather(send, recv, static_cast<size_t>(n), ncclFloat32, comm_, stream_));
    return std::make_unique<StreamPending>(stream_, device_);
  }

 private:
  // stream_'s next work starts after everything launched so far on the legacy default stream
  // (the kernels that wrote the inputs).
  void after_default_stream() {
    TARN_CUDA_CALL(cudaSetDevice(device_));
    TARN_CUDA_CALL(cudaEventRecord(inputs_ready_, cudaStreamLegacy));
    TARN_CUDA_CALL(cudaStreamWaitEvent(stream_, inputs_ready_, 0));
  }

  void check_root(const char* op, int root) const {
    TARN_ASSERT(root >= 0 && root < world_, op, ": root ", root, " is not a rank of a group of ", world_);
  }

  // At least `bytes` of device memory for the host collectives, grown as needed and kept.
  char* device_scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      TARN_CUDA_CALL(cudaSetDevice(device_));
      if (scratch_) TARN_CUDA_CALL(cudaFree(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      TARN_CUDA_CALL(cudaMalloc(&scratch_, bytes));
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  ncclComm_t comm_;
  int rank_, world_, device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  float* token_ = nullptr;
  char* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::vector<double> host_gathered_;
};

#else

#if defined(TARN_CUDA_EMULATED)
// The emulated build's "devices" are host memory, so a rank's collectives are the CPU thread
// group's. The overlapped all-reduce still answers through StreamPending, as NCCL's does, so
// that the emulator's in-flight events (emu::set_completion_polls) exercise the same polling.
class EmulatedDeviceCommunicator final : public Communicator {
 public:
  explicit EmulatedDeviceCommunicator(std::unique_ptr<Communicator> group) : group_(std::move(group)) {
    TARN_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~EmulatedDeviceCommunicator() override { cudaStreamDestroy(stream_); }
  EmulatedDeviceCommunicator(const EmulatedDeviceCommunicator&) = delete;
  EmulatedDeviceCommunicator& operator=(const EmulatedDeviceCommunicator&) = delete;

  int rank() const override { return group_->rank(); }
  int world() const override { return group_->world(); }
  const char* backend() const override { return group_->backend(); }
  void all_reduce_sum(float* data, int64_t n) override { group_->all_reduce_sum(data, n); }
  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    group_->reduce_scatter_sum(send, recv, n);
  }
  void all_gather(const float* send, float* recv, int64_t n) override { group_->all_gather(send, recv, n); }
  void broadcast(float* data, int64_t n, int root) override { group_->broadcast(data, n, root); }
  void all_reduce_host(double* data, int64_t n, ReduceOp op) override { group_->all_reduce_host(data, n, op); }
  void broadcast_host_bytes(void* data, int64_t bytes, int root) override {
    group_->broadcast_host_bytes(data, bytes, root);
  }
  void barrier() override { group_->barrier(); }

  std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) override {
    group_->all_reduce_sum(data, n);  // done at once here; the event below says when on hardware
    return std::make_unique<StreamPending>(stream_, 0);
  }

 private:
  std::unique_ptr<Communicator> group_;
  cudaStream_t stream_ = nullptr;
};
#endif

[[noreturn]] void no_nccl(const char* what) {
#if defined(TARN_CUDA_EMULATED)
  throw Error(str_cat(what, ": NCCL is not part of the emulated CUDA build (use local_communicators, which runs "
                            "the ranks as threads)"));
#else
  throw Error(str_cat(what, ": tarn was built without NCCL (cmake/TarnCuda.cmake did not find nccl.h and libnccl; "
                            "set NCCL_ROOT or install NCCL and reconfigure)"));
#endif
}

#endif

}  // namespace

#if defined(TARN_USE_NCCL)

bool nccl_available() { return true; }

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  TARN_NCCL_CALL(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

std::unique_ptr<Communicator> nccl_communicator(const NcclUniqueId& id, int rank, int world, int device) {
  TARN_ASSERT(world >= 1 && rank >= 0 && rank < world, "nccl_communicator: rank ", rank, " is not in a group of ",
              world);
  ncclUniqueId nccl_id;
  std::memcpy(nccl_id.internal, id.data(), id.size());
  TARN_CUDA_CALL(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  TARN_NCCL_CALL(ncclCommInitRank(&comm, world, nccl_id, rank));
  return std::make_unique<NcclCommunicator>(comm, rank, world, device);
}

std::vector<std::unique_ptr<Communicator>> local_communicators(int world) {
  int devices = 0;
  TARN_CUDA_CALL(cudaGetDeviceCount(&devices));
  TARN_CHECK(world >= 1 && world <= devices, "local_communicators: ", world, " ranks need as many GPUs, found ",
             devices);
  std::vector<int> device_list(world);
  for (int d = 0; d < world; ++d) device_list[d] = d;
  std::vector<ncclComm_t> comms(world);
  TARN_NCCL_CALL(ncclCommInitAll(comms.data(), world, device_list.data()));
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<NcclCommunicator>(comms[r], r, world, r));
  return ranks;
}

#else

bool nccl_available() { return false; }
NcclUniqueId nccl_unique_id() { no_nccl("nccl_unique_id"); }
std::unique_ptr<Communicator> nccl_communicator(const NcclUniqueId&, int, int, int) {
  no_nccl("nccl_communicator");
}

std::vector<std::unique_ptr<Communicator>> local_communicators(int world) {
#if defined(TARN_CUDA_EMULATED)
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (auto& group : cpu::thread_communicators(world))
    ranks.push_back(std::make_unique<EmulatedDeviceCommunicator>(std::move(group)));
  return ranks;
#else
  no_nccl("local_communicators");
#endif
}

#endif

}  // namespace tarn::kernels::TARN_CUDA_NS
