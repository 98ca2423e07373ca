// RAII streams and events (kernels/cuda_stream.h). The same source builds against the CUDA
// runtime and against the emulator's synchronous stand-ins (kernels/emu/runtime.cpp).
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_stream.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

cudaStream_t as_stream(void* p) { return static_cast<cudaStream_t>(p); }
cudaEvent_t as_event(void* p) { return static_cast<cudaEvent_t>(p); }

}  // namespace

Event::Event() {
  cudaEvent_t e = nullptr;
  TARN_CUDA_CALL(cudaEventCreate(&e));
  event_ = e;
}

// Destructors cannot throw: a failed destroy (a dead context) is left to the next checked call.
Event::~Event() {
  if (event_) cudaEventDestroy(as_event(event_));
}

Event::Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(as_event(event_));
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void Event::record() {
  TARN_ASSERT(event_, "Event::record: the event was moved from");
  TARN_CUDA_CALL(cudaEventRecord(as_event(event_), nullptr));
}

void Event::record(const Stream& stream) {
  TARN_ASSERT(event_ && stream.handle(), "Event::record: the event or the stream was moved from");
  TARN_CUDA_CALL(cudaEventRecord(as_event(event_), as_stream(stream.handle())));
}

void Event::synchronize() const {
  TARN_ASSERT(event_, "Event::synchronize: the event was moved from");
  TARN_CUDA_CALL(cudaEventSynchronize(as_event(event_)));
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  TARN_ASSERT(start.event_ && end.event_, "Event::elapsed_ms: an event was moved from");
  float ms = 0.0f;
  TARN_CUDA_CALL(cudaEventElapsedTime(&ms, as_event(start.event_), as_event(end.event_)));
  return ms;
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  TARN_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

// Work still queued finishes first, so that buffers the caller frees next are no longer in use.
Stream::~Stream() {
  if (!stream_) return;
  cudaStreamSynchronize(as_stream(stream_));
  cudaStreamDestroy(as_stream(stream_));
}

Stream::Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) {
      cudaStreamSynchronize(as_stream(stream_));
      cudaStreamDestroy(as_stream(stream_));
    }
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

void Stream::synchronize() const {
  TARN_ASSERT(stream_, "Stream::synchronize: the stream was moved from");
  TARN_CUDA_CALL(cudaStreamSynchronize(as_stream(stream_)));
}

void Stream::wait(const Event& event) const {
  TARN_ASSERT(stream_ && event.handle(), "Stream::wait: the stream or the event was moved from");
  TARN_CUDA_CALL(cudaStreamWaitEvent(as_stream(stream_), as_event(event.handle()), 0));
}

}  // namespace tarn::kernels::TARN_CUDA_NS
