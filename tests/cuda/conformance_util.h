#pragma once
// The conformance harness: every CUDA kernel against the CPU kernel of the same name, on the
// emulator under each thread order and, when a GPU is present, on the hardware.
//   Target        where the CUDA kernel runs (emulator in some thread order, or the GPU)
//   DeviceArray   a buffer on that target, filled from / read back to a host vector
//   TARN_ON(t, fn, args...)   calls tarn::kernels::cuda::fn on the GPU target, cuda_emu::fn else
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda_kernels.h"
#include "kernels/cuda_runtime.h"
#include "kernels/emu/emu.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {

enum class Target { emu_forward, emu_reverse, emu_random, gpu };

constexpr Target kAllTargets[] = {Target::emu_forward, Target::emu_reverse, Target::emu_random, Target::gpu};

inline std::string TargetName(const ::testing::TestParamInfo<Target>& info) {
  switch (info.param) {
    case Target::emu_forward: return "EmuForward";
    case Target::emu_reverse: return "EmuReverse";
    case Target::emu_random: return "EmuRandom";
    case Target::gpu: return "Gpu";
  }
  return "Unknown";
}

#if defined(TARN_WITH_CUDA)
#define TARN_ON(target, fn, ...)                                                        \
  ((target) == ::tarn::cuda_testing::Target::gpu ? ::tarn::kernels::cuda::fn(__VA_ARGS__) \
                                                 : ::tarn::kernels::cuda_emu::fn(__VA_ARGS__))
#else
#define TARN_ON(target, fn, ...) ::tarn::kernels::cuda_emu::fn(__VA_ARGS__)
#endif

// A buffer on the target: host memory for the emulator, device memory for the GPU.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(Target target, const std::vector<T>& host) : target_(target), n_(host.size()) {
    if (target_ == Target::gpu) {
      ptr_ = static_cast<T*>(kernels::cuda::device_malloc(bytes(), 0));
      if (n_) kernels::cuda::copy_host_to_device(ptr_, host.data(), bytes(), 0);
    } else {
      emu_ = host;
      ptr_ = emu_.data();
    }
  }
  // n copies of `fill` (outputs start as NaN, so that an element never written shows).
  DeviceArray(Target target, size_t n, T fill) : DeviceArray(target, std::vector<T>(n, fill)) {}
  ~DeviceArray() {
    if (target_ == Target::gpu) kernels::cuda::device_free(ptr_, 0);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }

  std::vector<T> host() const {
    if (target_ != Target::gpu) return emu_;
    std::vector<T> out(n_);
    if (n_) kernels::cuda::copy_device_to_host(out.data(), ptr_, bytes(), 0);
    return out;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  Target target_;
  size_t n_;
  std::vector<T> emu_;
  T* ptr_ = nullptr;
};

// Runs each test once per target: sets the emulator's thread order, or skips the GPU target
// when this build or this machine has none.
class Conformance : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    saved_order_ = emu::thread_order();
    switch (GetParam()) {
      case Target::emu_forward: emu::set_thread_order(emu::ThreadOrder::forward); break;
      case Target::emu_reverse: emu::set_thread_order(emu::ThreadOrder::reverse); break;
      case Target::emu_random: emu::set_thread_order(emu::ThreadOrder::random); break;
      case Target::gpu:
#if !defined(TARN_WITH_CUDA)
        GTEST_SKIP() << "built without the CUDA backend (TARN_CUDA=OFF): the emulated targets cover these kernels";
#else
        if (kernels::cuda::device_count() == 0)
          GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount() == 0): the emulated targets cover these kernels";
#endif
        break;
    }
  }
  void TearDown() override { emu::set_thread_order(saved_order_); }

  Target target() const { return GetParam(); }
  template <typename T>
  DeviceArray<T> dev(const std::vector<T>& host) const {
    return DeviceArray<T>(target(), host);
  }
  DeviceArray<float> out(size_t n) const { return DeviceArray<float>(target(), n, std::nanf("")); }

 private:
  emu::ThreadOrder saved_order_ = emu::ThreadOrder::forward;
};

// Deterministic test data.
inline std::vector<float> Random(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline std::vector<int32_t> RandomIds(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Every element within atol + rtol * |want| (NaN only where want is NaN): WithinBound
// (tests/cuda/tolerance.h) with that bound per element, the bound computed in float as the
// tests' rtol and atol are.
inline ::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want, float rtol,
                                           float atol) {
  std::vector<double> bound(want.size());
  for (size_t i = 0; i < want.size(); ++i) bound[i] = atol + rtol * std::fabs(want[i]);
  ::testing::AssertionResult r = WithinBound(got, want, bound);
  if (!r) r << "(rtol " << rtol << ", atol " << atol << ")";
  return r;
}

template <typename T>
::testing::AssertionResult BitwiseEqual(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ in their bits, first ["
                                       << first << "]: got " << got[first] << ", want " << want[first];
}

// Tolerances: derived per test from the precision each kernel computes in (tests/cuda/tolerance.h).

// Forces the linear-attention sequence split (kernels/cuda_kernels.h) for one scope, then
// restores the automatic choice (0).
class ForcedSplit {
 public:
  ForcedSplit(Target target, int segments) : target_(target) { Set(segments); }
  ~ForcedSplit() { Set(0); }
  ForcedSplit(const ForcedSplit&) = delete;
  ForcedSplit& operator=(const ForcedSplit&) = delete;

 private:
  void Set(int segments) { TARN_ON(target_, linear_attention_set_sequence_split, segments); }
  Target target_;
};

}  // namespace tarn::cuda_testing
