// Random fills on the GPU (kernels/random.h). nvcc's build draws the words with cuRAND's
// Philox4x32-10 (curand_Philox4x32_10 from curand_philox4x32_x.h, on the counter and key that
// curand_init(seed, stream, offset) sets up), the emulated build with kernels/cuda/philox.cuh:
// the same 32-bit words (tests/cuda/curand_reference_test.cpp checks curand_init + curand
// against philox.cuh). Only the Philox header is included: curand_kernel.h would put ~210 KiB of
// other generators' tables into the module's global memory.
// The words become floats through kernels/random.h's random_math, shared with the CPU.
// Each thread takes four consecutive words of the stream: four uniforms or two normals.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/philox.cuh"
#include "kernels/random.h"

#if defined(__CUDACC__)
#define QUALIFIERS static __forceinline__ __device__
#include <curand_philox4x32_x.h>
#endif

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr int kWords = 4;  // words per thread (one curand4)

// Block `block` of stream (seed, stream): curand_init's counter (block, stream) and key (seed).
__device__ __forceinline__ philox::Words block_words(uint64_t seed, uint64_t stream, uint64_t block) {
#if defined(__CUDACC__)
  const uint4 counter = make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                   static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
  const uint2 key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint4 r = curand_Philox4x32_10(counter, key);
  return philox::Words{{r.x, r.y, r.z, r.w}};
#else
  return philox::block(seed, stream, block);
#endif
}

// Words first .. first + 3 of stream (seed, stream), as curand4 after curand_init(seed, stream,
// first): `first` need not be a multiple of 4 (then two blocks are drawn).
__device__ __forceinline__ philox::Words four_words(uint64_t seed, uint64_t stream, uint64_t first) {
  const philox::Words a = block_words(seed, stream, first / kWords);
  const unsigned skip = static_cast<unsigned>(first % kWords);
  if (skip == 0) return a;
  const philox::Words b = block_words(seed, stream, first / kWords + 1);
  philox::Words out{};
  for (unsigned w = 0; w < kWords; ++w) out.w[w] = w + skip < kWords ? a.w[w + skip] : b.w[w + skip - kWords];
  return out;
}

// out: (n). Thread j writes out[kValues j .. kValues j + kValues - 1], value(r, v) for v < kValues,
// from the four words r at offset + 4j.
template <int kValues, class Value>
__device__ __forceinline__ void fill_from_words(float* out, int64_t n, uint64_t seed, uint64_t stream,
                                                uint64_t offset, Value value) {
  const int64_t groups = (n + kValues - 1) / kValues;
  for (int64_t j = global_index(); j < groups; j += global_stride()) {
    const philox::Words r = four_words(seed, stream, offset + static_cast<uint64_t>(j) * kWords);
#pragma unroll
    for (int v = 0; v < kValues; ++v) {
      const int64_t i = j * kValues + v;
      if (i < n) out[i] = value(r, v);
    }
  }
}

// One value per word.
__global__ void uniform_kernel(float* out, int64_t n, float low, float span, uint64_t seed, uint64_t stream,
                               uint64_t offset) {
  fill_from_words<kWords>(out, n, seed, stream, offset, [=](const philox::Words& r, int w) {
    return fmaf(span, random_math::to_uniform(r.w[w]), low);
  });
}

// One value per two words.
__global__ void normal_kernel(float* out, int64_t n, float mean, float stddev, uint64_t seed, uint64_t stream,
                              uint64_t offset) {
  fill_from_words<kWords / 2>(out, n, seed, stream, offset, [=](const philox::Words& r, int v) {
    return fmaf(stddev, random_math::to_normal(r.w[2 * v], r.w[2 * v + 1]), mean);
  });
}

void check_fill(const char* op, const float* out, int64_t n) {
  TARN_ASSERT(n >= 0, op, ": negative length ", n);
  TARN_ASSERT(n == 0 || out != nullptr, op, ": null output buffer for ", n, " values");
}

}  // namespace

void uniform_fill(float* out, int64_t n, float low, float high, const PhiloxPosition& at) {
  check_fill("uniform_fill", out, n);
  TARN_ASSERT(low <= high, "uniform_fill: low ", low, " is above high ", high);
  if (n == 0) return;
  const int64_t groups = (n + kWords - 1) / kWords;
  tarn::launch(uniform_kernel, grid_for(groups), kBlock, 0, nullptr, out, n, low, high - low, at.seed, at.stream,
               at.offset);
}

void normal_fill(float* out, int64_t n, float mean, float stddev, const PhiloxPosition& at) {
  check_fill("normal_fill", out, n);
  TARN_ASSERT(stddev >= 0.0f, "normal_fill: negative standard deviation ", stddev);
  if (n == 0) return;
  const int64_t groups = (n + 1) / 2;
  tarn::launch(normal_kernel, grid_for(groups), kBlock, 0, nullptr, out, n, mean, stddev, at.seed, at.stream,
               at.offset);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
