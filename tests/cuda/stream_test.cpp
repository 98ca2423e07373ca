// Streams and events (kernels/cuda_stream.h): the emulated build's stand-ins, and the real
// runtime when a GPU is present: ordering of work on a stream, timing, moves, and that a
// failing call names itself.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda_runtime.h"
#include "kernels/cuda_stream.h"

namespace tarn::kernels {
namespace {

TEST(EmulatedStream, EventsTimeTheWorkBetweenThem) {
  cuda_emu::Stream stream;
  cuda_emu::Event start, stop;
  start.record(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop.record(stream);
  stop.synchronize();
  const float ms = cuda_emu::Event::elapsed_ms(start, stop);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 2000.0f);
}

TEST(EmulatedStream, MovesTransferOwnershipAndTheMovedFromObjectSaysSo) {
  cuda_emu::Stream a;
  void* handle = a.handle();
  ASSERT_NE(handle, nullptr);
  cuda_emu::Stream b(std::move(a));
  EXPECT_EQ(b.handle(), handle);
  EXPECT_EQ(a.handle(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_THROW(a.synchronize(), Error);
  cuda_emu::Event e, f;
  void* event = e.handle();
  f = std::move(e);
  EXPECT_EQ(f.handle(), event);
  EXPECT_THROW(e.record(), Error);
  f.record(b);
  b.wait(f);
  b.synchronize();
}

TEST(EmulatedStream, ElapsedTimeOfAMovedFromEventNamesTheCall) {
  cuda_emu::Event start, stop;
  cuda_emu::Event taken(std::move(stop));
  try {
    (void)cuda_emu::Event::elapsed_ms(start, stop);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("elapsed_ms"), std::string::npos) << e.what();
  }
}

// On a GPU: events recorded on a real stream give a sane elapsed time, and a second stream can
// wait on the first one's event. (The kernels' own timing runs in tools/bench/cuda_kernels_bench.)
TEST(GpuStream, EventsAndWaitsWorkOnRealStreams) {
#if !defined(TARN_WITH_CUDA)
  GTEST_SKIP() << "built without the CUDA backend (TARN_CUDA=OFF)";
#else
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount() == 0)";
  cuda::Stream first, second;
  cuda::Event start, stop;
  start.record(first);
  stop.record(first);
  stop.synchronize();
  const float ms = cuda::Event::elapsed_ms(start, stop);
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 1000.0f);
  second.wait(stop);
  second.synchronize();
  first.synchronize();
#endif
}

}  // namespace
}  // namespace tarn::kernels
