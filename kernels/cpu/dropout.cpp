#include "kernels/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/elementwise_parallel.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

// Philox4x32-10 constants (Salmon et al., SC'11), the same as framework/rng.cpp: the kernels
// layer cannot include framework/, so the bijection is restated here in a form the compiler
// vectorises (kLanes counter blocks side by side); tests check it against philox_at.
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;
constexpr int kWords = 4;                       // outputs per Philox block
constexpr int64_t kLanes = 16;                  // blocks generated together (one AVX-512 vector)
constexpr int64_t kBatch = kLanes * kWords;     // elements per batch

// out[4 l + w] = output w of block (first_block + l) of stream (seed, stream): the outputs
// first_block * 4 ... in element order.
void philox_batch(uint64_t seed, uint64_t stream, uint64_t first_block, uint32_t out[kBatch]) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) {
    const uint64_t block = first_block + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(block);
    c1[l] = static_cast<uint32_t>(block >> 32);
    c2[l] = static_cast<uint32_t>(stream);
    c3[l] = static_cast<uint32_t>(stream >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < kRounds; ++round) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0[l];
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = static_cast<uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<uint32_t>(p0);
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  for (int64_t l = 0; l < kLanes; ++l) {
    out[kWords * l + 0] = c0[l];
    out[kWords * l + 1] = c1[l];
    out[kWords * l + 2] = c2[l];
    out[kWords * l + 3] = c3[l];
  }
}

}  // namespace

void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream) {
  const uint64_t threshold64 = dropout_threshold(p);
  if (threshold64 > UINT32_MAX) {  // p == 1: everything dropped
    parallel_chunks(n, [=](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = 0.0f;
    });
    return;
  }
  const uint32_t threshold = static_cast<uint32_t>(threshold64);
  const float scale = 1.0f / (1.0f - p);
  const int64_t batches = (n + kBatch - 1) / kBatch;
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
  for (int64_t b = 0; b < batches; ++b) {
    uint32_t words[kBatch];
    philox_batch(seed, stream, static_cast<uint64_t>(b) * kLanes, words);
    const int64_t base = b * kBatch;
    const int64_t len = std::min(kBatch, n - base);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) y[base + i] = x[base + i] * (words[i] >= threshold ? scale : 0.0f);
  }
}

}  // namespace tarn::kernels::cpu
