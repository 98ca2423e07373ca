// CUDA chunk kernels of routed cross-attention (kernels/cuda/chunk_attention.cu) against the CPU
// kernels of kernels/chunk_attention.h: the chunks' means and their gradient and the choice of
// the best chunks bit for bit (the same operations in the same order, no products to contract),
// the forward's choice of the best children of chosen chunks bit for bit on exact scores (the
// CPU's come from a tile GEMM), and softmax attention over the chosen chunks, forward and
// backward, within an a-priori bound.
//
// Tolerance of the attention: every score is a dot of d products, within gamma_{d+1} of its
// magnitude a_ij = scale Σ_e |q_ie k_je| on each side; P_ij = exp(s_ij - max) / z then moves by
// at most twice its score's error (the max and the sum shift with it) plus gamma_{K+4} (K keys
// in the sum, the exp, the division). Each result is a sum of products of such factors:
// within 2 (eps_P + gamma_{K + d + 8}) of the same sum with every factor and every dot taken in
// absolute value (the magnitudes below), on each side; eps_P is the row's largest.
//
// Shapes: padding (a key in a chunk, and a whole chunk), a last chunk shorter than the others,
// top at and above the chunks there are (-1 picks), a query whose chunks hold padding only
// (zeros, and no gradient), d below, at and above a warp, and 70 queries (three of the dk, dv
// pass's 32-query lists). Thread orders: every test runs under the three emulated orders (and on
// a GPU when there is one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "kernels/chunk_attention.h"
#include "kernels/cuda_chunk_attention.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;
using cpu::ChunkAttentionDims;

class ChunkAttentionConformance : public Conformance {};

const ChunkAttentionDims kShapes[] = {
    {2, 3, 5, 23, 8, 4, 3},    // 6 chunks, the last of 3 keys
    {1, 2, 70, 40, 32, 16, 2}, // a warp's d, 70 queries
    {2, 1, 9, 12, 40, 5, 3},   // 3 chunks, top 3: every chunk
    {1, 1, 4, 6, 3, 1, 6},     // chunk 1, top 6 of 6
};

// Batch row 1: key 1 padded and the whole last chunk; row 0 none.
std::vector<float> Padding(const ChunkAttentionDims& s) {
  std::vector<float> p(static_cast<size_t>(s.batch * s.nk), 0.0f);
  if (s.batch > 1)
    for (int64_t j = 0; j < s.nk; ++j) p[s.nk + j] = j == 1 || j >= (s.chunks() - 1) * s.chunk ? 1.0f : 0.0f;
  return p;
}

std::string Name(const ChunkAttentionDims& s) {
  std::ostringstream os;
  os << "B" << s.batch << " H" << s.heads << " nq " << s.nq << " nk " << s.nk << " d " << s.d << " chunk " << s.chunk
     << " top " << s.top;
  return os.str();
}

TEST_P(ChunkAttentionConformance, ChunkMeansAndTheirGradientAreTheCpusBits) {
  for (const ChunkAttentionDims& s : kShapes) {
    const int64_t rows = s.batch * s.heads * s.nk * s.d, means = s.batch * s.heads * s.chunks() * s.d;
    const std::vector<float> x = Random(static_cast<size_t>(rows), -2, 2, 1), pad = Padding(s);
    const std::vector<float> dmean = Random(static_cast<size_t>(means), -1, 1, 2);
    std::vector<float> mean(static_cast<size_t>(means)), empty(static_cast<size_t>(s.batch * s.chunks())),
        dx(static_cast<size_t>(rows));
    cpu::chunk_mean_forward(s, x.data(), pad.data(), mean.data(), empty.data());
    cpu::chunk_mean_backward(s, pad.data(), dmean.data(), dx.data());
    DeviceArray<float> gx = dev(x), gpad = dev(pad), gdmean = dev(dmean), gmean = out(mean.size()),
                       gempty = out(empty.size()), gdx = out(dx.size());
    TARN_ON(target(), chunk_mean_forward, s, gx.get(), gpad.get(), gmean.get(), gempty.get());
    TARN_ON(target(), chunk_mean_backward, s, gpad.get(), gdmean.get(), gdx.get());
    EXPECT_TRUE(BitwiseEqual(gmean.host(), mean)) << Name(s) << ": mean";
    EXPECT_TRUE(BitwiseEqual(gempty.host(), empty)) << Name(s) << ": empty";
    EXPECT_TRUE(BitwiseEqual(gdx.host(), dx)) << Name(s) << ": dx";
  }
}

TEST_P(ChunkAttentionConformance, ChoiceIsTheCpus) {
  for (const ChunkAttentionDims& s : kShapes) {
    const int64_t chunks = s.chunks(), top = std::min(s.top, chunks);
    ChunkAttentionDims c = s;
    c.top = top;
    // few distinct values: many ties, which go to the earlier chunk
    std::vector<float> scores = Random(static_cast<size_t>(s.batch * s.heads * s.nq * chunks), 0, 4, 3);
    for (float& x : scores) x = std::floor(x);
    std::vector<float> empty(static_cast<size_t>(s.batch * chunks), 0.0f);
    if (s.batch > 1) empty[chunks + 1] = empty[2 * chunks - 1] = 1.0f;
    std::vector<float> chosen(static_cast<size_t>(s.batch * s.heads * s.nq * top));
    cpu::chunk_choose(c, scores.data(), empty.data(), chosen.data());
    DeviceArray<float> gscores = dev(scores), gempty = dev(empty), gchosen = out(chosen.size());
    TARN_ON(target(), chunk_choose, c, gscores.get(), gempty.get(), gchosen.get());
    EXPECT_TRUE(BitwiseEqual(gchosen.host(), chosen)) << Name(c);
  }
}

// One level down a tree of landmarks: the forward's choice within the chosen chunks. q and k
// hold small integers and the scale is 1/2, so every score is exact in any order of the sum: the
// choice (ties included, many) must be the CPU's. The read beside it is the one without a choice,
// bit for bit (the same kernel; the next test bounds it against the CPU).
TEST_P(ChunkAttentionConformance, ChoiceWithinTheParentsIsTheCpus) {
  for (ChunkAttentionDims s : kShapes) {
    s.top = std::min(s.top, s.chunks());
    const int64_t rows = s.batch * s.heads * s.nq;
    std::vector<float> q = Random(static_cast<size_t>(rows * s.d), -3, 3, 4);
    std::vector<float> k = Random(static_cast<size_t>(s.batch * s.heads * s.nk * s.d), -3, 3, 5);
    for (float& x : q) x = std::floor(x);
    for (float& x : k) x = std::floor(x);
    const std::vector<float> v = Random(k.size(), -1, 1, 7);
    // the parents as the level above gives them: its choice over random scores, best first
    const std::vector<float> scores = Random(static_cast<size_t>(rows * s.chunks()), -1, 1, 6);
    std::vector<float> parents(static_cast<size_t>(rows * s.top));
    cpu::chunk_choose(s, scores.data(), nullptr, parents.data());
    for (size_t r = 0; r < parents.size(); r += 5) parents[r] = -1.0f;  // some none
    const std::vector<float> pad = Padding(s);
    DeviceArray<float> gq = dev(q), gk = dev(k), gv = dev(v), gparents = dev(parents), gpad = dev(pad),
                       go = out(q.size()), glse = out(static_cast<size_t>(rows));
    TARN_ON(target(), chunk_attention_forward, s, gq.get(), gk.get(), gv.get(), gparents.get(), gpad.get(), 0.5f,
            go.get(), glse.get(), 0, nullptr);
    const std::vector<float> read = go.host(), lse = glse.host();
    for (int64_t pick : {int64_t{1}, int64_t{3}, s.top * s.chunk + 1}) {
      std::vector<float> chosen(static_cast<size_t>(rows * pick)), o(q.size()), l(static_cast<size_t>(rows));
      cpu::chunk_attention_forward(s, q.data(), k.data(), v.data(), parents.data(), pad.data(), 0.5f, o.data(),
                                   l.data(), pick, chosen.data());
      DeviceArray<float> gchosen = out(chosen.size()), go2 = out(q.size()), glse2 = out(l.size());
      TARN_ON(target(), chunk_attention_forward, s, gq.get(), gk.get(), gv.get(), gparents.get(), gpad.get(), 0.5f,
              go2.get(), glse2.get(), pick, gchosen.get());
      EXPECT_TRUE(BitwiseEqual(gchosen.host(), chosen)) << Name(s) << " pick " << pick;
      EXPECT_TRUE(BitwiseEqual(go2.host(), read)) << Name(s) << " pick " << pick << ": out";
      EXPECT_TRUE(BitwiseEqual(glse2.host(), lse)) << Name(s) << " pick " << pick << ": lse";
    }
  }
}

TEST_P(ChunkAttentionConformance, AttentionAndItsGradientsMatchTheCpu) {
  for (ChunkAttentionDims s : kShapes) {
    s.top = std::min(s.top, s.chunks());
    const int64_t bh = s.batch * s.heads, chunks = s.chunks(), d = s.d;
    const size_t nq_d = static_cast<size_t>(bh * s.nq * d), nk_d = static_cast<size_t>(bh * s.nk * d);
    const std::vector<float> q = Random(nq_d, -1, 1, 4), k = Random(nk_d, -1, 1, 5), v = Random(nk_d, -1, 1, 6),
                             dout = Random(nq_d, -1, 1, 7), pad = Padding(s);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // The picks as routed makes them: chunk_choose over random scores, chunks of padding never.
    std::vector<float> mean(static_cast<size_t>(bh * chunks * d)), empty(static_cast<size_t>(s.batch * chunks));
    cpu::chunk_mean_forward(s, k.data(), pad.data(), mean.data(), empty.data());
    const std::vector<float> scores = Random(static_cast<size_t>(bh * s.nq * chunks), -1, 1, 8);
    std::vector<float> chosen(static_cast<size_t>(bh * s.nq * s.top));
    cpu::chunk_choose(s, scores.data(), nullptr, chosen.data());
    // query 0 of each head of batch row 1 reads the chunk of padding only
    if (s.batch > 1)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t t = 0; t < s.top; ++t)
          chosen[((s.heads + h) * s.nq) * s.top + t] = t == 0 ? static_cast<float>(chunks - 1) : -1.0f;

    std::vector<float> o(nq_d), lse(static_cast<size_t>(bh * s.nq)), dq(nq_d), dk(nk_d), dv(nk_d);
    cpu::chunk_attention_forward(s, q.data(), k.data(), v.data(), chosen.data(), pad.data(), scale, o.data(),
                                 lse.data(), 0, nullptr);
    cpu::chunk_attention_backward(s, q.data(), k.data(), v.data(), chosen.data(), pad.data(), scale, o.data(),
                                  lse.data(), dout.data(), dq.data(), dk.data(), dv.data());
    DeviceArray<float> gq = dev(q), gk = dev(k), gv = dev(v), gdout = dev(dout), gpad = dev(pad), gchosen = dev(chosen),
                       go = out(nq_d), glse = out(lse.size()), gdq = out(nq_d), gdk = out(nk_d), gdv = out(nk_d);
    TARN_ON(target(), chunk_attention_forward, s, gq.get(), gk.get(), gv.get(), gchosen.get(), gpad.get(), scale,
            go.get(), glse.get(), 0, nullptr);
    // the backward reads the CPU's out and lse, so that each pass is judged on its own
    DeviceArray<float> co = dev(o), clse = dev(lse);
    TARN_ON(target(), chunk_attention_backward, s, gq.get(), gk.get(), gv.get(), gchosen.get(), gpad.get(), scale,
            co.get(), clse.get(), gdout.get(), gdq.get(), gdk.get(), gdv.get());

    // Magnitudes in double, from the CPU's P (exact enough for a bound).
    std::vector<double> mo(nq_d, 0), mdq(nq_d, 0), mdk(nk_d, 0), mdv(nk_d, 0);
    double eps_p = 0;
    const int64_t keys = s.top * s.chunk;
    for (int64_t r = 0; r < bh * s.nq; ++r) {
      if (std::isinf(lse[r])) continue;
      const int64_t head = r / s.nq, b = head / s.heads;
      double di = 0;
      for (int64_t e = 0; e < d; ++e) di += std::fabs(double(dout[r * d + e]) * o[r * d + e]);
      for (int64_t t = 0; t < s.top; ++t) {
        const int64_t c = static_cast<int64_t>(chosen[r * s.top + t]);
        for (int64_t j = c * s.chunk; c >= 0 && j < std::min(s.nk, (c + 1) * s.chunk); ++j) {
          if (pad[b * s.nk + j] != 0.0f) continue;
          const int64_t kj = (head * s.nk + j) * d;
          double sc = 0, a = 0, dp = 0;
          for (int64_t e = 0; e < d; ++e) {
            sc += double(q[r * d + e]) * k[kj + e];
            a += std::fabs(double(q[r * d + e]) * k[kj + e]);
            dp += std::fabs(double(dout[r * d + e]) * v[kj + e]);
          }
          eps_p = std::max(eps_p, 2 * Gamma(d + 1, kF32) * scale * a);
          const double p = std::exp(scale * sc - lse[r]), ds = p * (dp + di) * scale;
          for (int64_t e = 0; e < d; ++e) {
            mo[r * d + e] += p * std::fabs(v[kj + e]);
            mdq[r * d + e] += ds * std::fabs(k[kj + e]);
            mdk[kj + e] += ds * std::fabs(q[r * d + e]);
            mdv[kj + e] += p * std::fabs(dout[r * d + e]);
          }
        }
      }
    }
    const double rel = 2 * (eps_p + Gamma(keys + d + 8, kF32));
    EXPECT_TRUE(WithinBound(go.host(), o, Scaled(mo, rel))) << Name(s) << ": out";
    for (size_t r = 0; r < lse.size(); ++r)
      if (std::isinf(lse[r])) {
        EXPECT_EQ(glse.host()[r], lse[r]) << Name(s) << ": lse of row " << r;
      } else {
        EXPECT_NEAR(glse.host()[r], lse[r], rel * (std::fabs(lse[r]) + 1)) << Name(s) << ": lse of row " << r;
      }
    EXPECT_TRUE(WithinBound(gdq.host(), dq, Scaled(mdq, rel))) << Name(s) << ": dq";
    EXPECT_TRUE(WithinBound(gdk.host(), dk, Scaled(mdk, rel))) << Name(s) << ": dk";
    EXPECT_TRUE(WithinBound(gdv.host(), dv, Scaled(mdv, rel))) << Name(s) << ": dv";
  }
}

TEST_P(ChunkAttentionConformance, RefusesReadsLargerThanItsSharedMemory) {
  const ChunkAttentionDims s{1, 1, 1, 4096, 1, 64, 64};  // 4,096 keys a query
  DeviceArray<float> buf = out(4096);
  EXPECT_THROW(TARN_ON(target(), chunk_attention_forward, s, buf.get(), buf.get(), buf.get(), buf.get(), nullptr, 1.0f,
                       buf.get(), buf.get(), 0, nullptr),
               Error);
  const ChunkAttentionDims small{1, 1, 1, 4, 1, 2, 2};  // a read it takes, but more picks than it keeps
  EXPECT_THROW(TARN_ON(target(), chunk_attention_forward, small, buf.get(), buf.get(), buf.get(), buf.get(), nullptr,
                       1.0f, buf.get(), buf.get(), kernels::kChunkMaxTop + 1, buf.get()),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Targets, ChunkAttentionConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
