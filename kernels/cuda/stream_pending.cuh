#pragma once
// Work queued on a stream, as a kernels::PendingCollective (kernels/collectives.h): an event
// recorded after it tells when it is done. NCCL's overlapped all-reduce returns one
// (kernels/cuda/collectives.cu), and so does the emulated build's device communicator, so that
// the polling the gradient synchronisation does after every backward node runs the same code
// on the emulator as on hardware.
#include "kernels/collectives.h"
#include "kernels/cuda/launch.cuh"

namespace tarn::kernels::TARN_CUDA_NS {

class StreamPending final : public PendingCollective {
 public:
  // Done once everything queued on `stream` (of `device`) so far has run.
  StreamPending(cudaStream_t stream, int device) : device_(device) {
    TARN_CUDA_CALL(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    TARN_CUDA_CALL(cudaEventRecord(done_, stream));
  }
  ~StreamPending() override { cudaEventDestroy(done_); }
  StreamPending(const StreamPending&) = delete;
  StreamPending& operator=(const StreamPending&) = delete;

  bool test() override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) {
      // The query leaves cudaErrorNotReady as this thread's last error; the next kernel's launch
      // check (tarn::check_launch) would throw it as its own failure. PyTorch clears it the same.
      (void)cudaGetLastError();
      return false;
    }
    TARN_CUDA_CALL(e);
    return true;
  }

  // The default stream's later work (the optimizer reading the sums) waits for it; the host
  // does not.
  void wait() override {
    TARN_CUDA_CALL(cudaSetDevice(device_));
    TARN_CUDA_CALL(cudaStreamWaitEvent(cudaStreamLegacy, done_, 0));
  }

 private:
  cudaEvent_t done_ = nullptr;
  int device_;
};

}  // namespace tarn::kernels::TARN_CUDA_NS
