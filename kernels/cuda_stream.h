#pragma once
// RAII CUDA streams and events (kernels/cuda/stream.cu), behind plain C++ declarations so that
// callers compile without CUDA headers. Every runtime call is checked and a failure throws
// tarn::Error naming the call. Two builds of one source, as kernels/cuda_kernels.h:
//   tarn::kernels::cuda      the CUDA runtime (only when TARN_WITH_CUDA)
//   tarn::kernels::cuda_emu  the emulator's stand-ins: work runs synchronously at launch, so
//                            synchronize and wait return at once and events read the host clock
// Usage, timing a kernel:
//   Event start, stop;  start.record(s);  ...launch on s...;  stop.record(s);
//   stop.synchronize();  float ms = Event::elapsed_ms(start, stop);

namespace tarn::kernels::cuda {
#include "kernels/cuda/stream_api.inc"
}  // namespace tarn::kernels::cuda

namespace tarn::kernels::cuda_emu {
#include "kernels/cuda/stream_api.inc"
}  // namespace tarn::kernels::cuda_emu
