// kernels/cuda/mma.cuh on the emulator: its fallback against a plain loop for every layout pair,
// and the misuses it must make visible (a wrong layout, a read of a stored tile before
// __syncwarp, a misaligned pointer), under each thread order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/emu/bf16.h"
#include "tests/cuda/emu_test_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::emu::testing {
namespace {

namespace mma = ::tarn::kernels::cuda_emu::mma;
using cuda_testing::AbsProduct;
using cuda_testing::Gamma;
using cuda_testing::kF32;
using cuda_testing::kF32TensorCore;
using cuda_testing::WithinBound;

constexpr int kM = 32, kN = 48, kK = 64;  // 2 x 3 output tiles, 4 steps deep

// A (M x K) and B (K x N) as bf16 in either layout: element (r, c) of a rows x cols matrix is
// at r * cols + c (row-major) or c * rows + r (column-major).
template <typename L>
int at(int r, int c, int rows, int cols) {
  return L::row_major ? r * cols + c : c * rows + r;
}

// C = C0 + A B: one warp per 16x16 tile of C, operands staged in dynamic shared memory with
// the layouts the kernel is told (the misuse test tells it layouts that differ from memory's).
template <typename LA, typename LB>
__global__ void tile_product(const bf16* a, const bf16* b, const float* c0, float* c) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  unsigned char* smem = mma::align_shared(smem_unaligned);
  bf16* as = reinterpret_cast<bf16*>(smem);
  bf16* bs = as + kM * kK;
  float* cs = reinterpret_cast<float*>(bs + kK * kN);
  for (int i = threadIdx.x; i < kM * kK; i += blockDim.x) as[i] = a[i];
  for (int i = threadIdx.x; i < kK * kN; i += blockDim.x) bs[i] = b[i];
  for (int i = threadIdx.x; i < kM * kN; i += blockDim.x) cs[i] = c0[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, ti = warp / (kN / 16), tj = warp % (kN / 16);
  mma::Accumulator acc;
  mma::load(acc, cs + ti * 16 * kN + tj * 16, kN);
  for (int k = 0; k < kK / 16; ++k) {
    mma::FragmentA<LA> fa;
    mma::FragmentB<LB> fb;
    const int lda = LA::row_major ? kK : kM, ldb = LB::row_major ? kN : kK;
    mma::load(fa, as + at<LA>(ti * 16, k * 16, kM, kK), lda);
    mma::load(fb, bs + at<LB>(k * 16, tj * 16, kK, kN), ldb);
    mma::multiply_add(acc, fa, fb);
  }
  mma::store(cs + ti * 16 * kN + tj * 16, acc, kN);
  __syncthreads();
  for (int i = threadIdx.x; i < kM * kN; i += blockDim.x) c[i] = cs[i];
}

struct Case {
  std::vector<float> a, b, c0;  // bf16-exact values, row-major
};

Case MakeCase(uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Case k;
  k.a.resize(kM * kK);
  k.b.resize(kK * kN);
  k.c0.resize(kM * kN);
  for (float& x : k.a) x = bf16_round(dist(gen));
  for (float& x : k.b) x = bf16_round(dist(gen));
  for (float& x : k.c0) x = dist(gen);
  return k;
}

// The product by a plain loop in double.
std::vector<float> Reference(const Case& k) {
  std::vector<float> c(kM * kN);
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) {
      double s = k.c0[i * kN + j];
      for (int p = 0; p < kK; ++p) s += static_cast<double>(k.a[i * kK + p]) * k.b[p * kN + j];
      c[i * kN + j] = static_cast<float>(s);
    }
  return c;
}

// Runs tile_product<KA, KB> on A stored in layout SA and B in layout SB.
template <typename SA, typename SB, typename KA = SA, typename KB = SB>
std::vector<float> RunProduct(const Case& k) {
  std::vector<bf16> a(kM * kK), b(kK * kN);
  for (int r = 0; r < kM; ++r)
    for (int c = 0; c < kK; ++c) a[at<SA>(r, c, kM, kK)] = bf16_from_float(k.a[r * kK + c]);
  for (int r = 0; r < kK; ++r)
    for (int c = 0; c < kN; ++c) b[at<SB>(r, c, kK, kN)] = bf16_from_float(k.b[r * kN + c]);
  std::vector<float> c(kM * kN, std::nanf(""));
  const size_t smem = mma::kSharedSlack + sizeof(bf16) * (kM * kK + kK * kN) + sizeof(float) * kM * kN;
  tarn::launch(tile_product<KA, KB>, 1, 32 * (kM / 16) * (kN / 16), smem, nullptr, a.data(), b.data(), k.c0.data(),
               c.data());
  return c;
}

// Largest |got - want| (the misuse tests: far off).
double MaxError(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
  }
  return worst;
}

// What a tile product may differ from the double loop by, per element. Products of bf16 values
// are exact in f32, so only the k additions of C0 + sum_k a_k b_k round: within gamma_k(u)
// (|c0| + sum |a_k b_k|) with the tensor cores' accumulation (u = 2^-23: the emulator's f32
// sums are within it), plus the reference's one rounding to f32 (2^-24 |want|).
std::vector<double> SumBound(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0,
                             const std::vector<float>& want, int m, int n, int k) {
  std::vector<double> bound = AbsProduct(false, false, m, n, k, a.data(), b.data());
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] = Gamma(k, kF32TensorCore) * (bound[i] + (c0.empty() ? 0.0 : std::fabs(c0[i]))) +
               kF32 * std::fabs(want[i]);
  return bound;
}

class MmaEmulation : public ::testing::TestWithParam<ThreadOrder> {};

TEST_P(MmaEmulation, EveryLayoutPairMatchesAPlainLoop) {
  OrderScope order(GetParam());
  const Case k = MakeCase(11);
  const auto want = Reference(k);
  using R = mma::RowMajor;
  using C = mma::ColMajor;
  const auto bound = SumBound(k.a, k.b, k.c0, want, kM, kN, kK);
  EXPECT_TRUE(WithinBound(RunProduct<R, R>(k), want, bound)) << "A row-major, B row-major";
  EXPECT_TRUE(WithinBound(RunProduct<R, C>(k), want, bound)) << "A row-major, B column-major";
  EXPECT_TRUE(WithinBound(RunProduct<C, R>(k), want, bound)) << "A column-major, B row-major";
  EXPECT_TRUE(WithinBound(RunProduct<C, C>(k), want, bound)) << "A column-major, B column-major";
}

TEST_P(MmaEmulation, AFragmentLoadedWithTheWrongLayoutGivesAWrongProduct) {
  // The kernel claims A is row-major while memory holds it column-major (and B the other way
  // round): the tiles are read transposed, and the product must differ clearly, so that a
  // kernel's layout mistake cannot pass its conformance tests.
  OrderScope order(GetParam());
  const Case k = MakeCase(12);
  const auto want = Reference(k);
  using R = mma::RowMajor;
  using C = mma::ColMajor;
  EXPECT_GT(MaxError(RunProduct<C, R, R, R>(k), want), 0.1) << "A misread";
  EXPECT_GT(MaxError(RunProduct<R, C, R, R>(k), want), 0.1) << "B misread";
}

// One warp: C = A B for one 16x16x16 tile, stored to shared memory, then lane l copies the
// elements 8 l .. 8 l + 7 of the stored tile, most of which other lanes stored.
template <bool kSyncBeforeRead>
__global__ void store_then_read(const bf16* a, const bf16* b, float* c) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  unsigned char* smem = mma::align_shared(smem_unaligned);
  bf16* as = reinterpret_cast<bf16*>(smem);
  bf16* bs = as + 256;
  float* cs = reinterpret_cast<float*>(bs + 256);
  for (int i = threadIdx.x; i < 256; i += 32) as[i] = a[i], bs[i] = b[i];
  __syncwarp();
  mma::Accumulator acc;
  mma::zero(acc);
  mma::FragmentA<mma::RowMajor> fa;
  mma::FragmentB<mma::RowMajor> fb;
  mma::load(fa, as, 16);
  mma::load(fb, bs, 16);
  mma::multiply_add(acc, fa, fb);
  mma::store(cs, acc, 16);
  if (kSyncBeforeRead) __syncwarp();
  for (int t = 0; t < 8; ++t) c[threadIdx.x * 8 + t] = cs[threadIdx.x * 8 + t];
}

TEST_P(MmaEmulation, ReadingAStoredTileBeforeSyncwarpIsCaught) {
  // store() writes only the lane's share, as wmma's store_matrix_sync: without __syncwarp the
  // first lane to run on reads its neighbours' elements before they store them (dynamic shared
  // memory starts as NaN), in every thread order; with it every element is right.
  OrderScope order(GetParam());
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<bf16> a(256), b(256);
  for (auto& x : a) x = bf16_from_float(dist(gen));
  for (auto& x : b) x = bf16_from_float(dist(gen));
  std::vector<float> want(256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double s = 0;
      for (int p = 0; p < 16; ++p) s += static_cast<double>(bf16_to_float(a[i * 16 + p])) * bf16_to_float(b[p * 16 + j]);
      want[i * 16 + j] = static_cast<float>(s);
    }
  const size_t smem = mma::kSharedSlack + 2 * 256 * sizeof(bf16) + 256 * sizeof(float);
  std::vector<float> synced(256), racy(256);
  tarn::launch(store_then_read<true>, 1, 32, smem, nullptr, a.data(), b.data(), synced.data());
  tarn::launch(store_then_read<false>, 1, 32, smem, nullptr, a.data(), b.data(), racy.data());
  std::vector<float> af(256), bf(256);
  for (int i = 0; i < 256; ++i) af[i] = bf16_to_float(a[i]), bf[i] = bf16_to_float(b[i]);
  EXPECT_TRUE(WithinBound(synced, want, SumBound(af, bf, {}, want, 16, 16, 16)));
  int unwritten = 0;
  for (float x : racy) unwritten += std::isnan(x);
  EXPECT_GT(unwritten, 0) << "a read before __syncwarp went unnoticed";
}

__global__ void load_misaligned(const bf16* a, float* c) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  unsigned char* smem = mma::align_shared(smem_unaligned);
  bf16* as = reinterpret_cast<bf16*>(smem);
  for (int i = threadIdx.x; i < 17 * 16; i += 32) as[i] = a[i];
  __syncwarp();
  mma::FragmentA<mma::RowMajor> fa;
  mma::load(fa, as + 8, 16);  // 16 bytes in: wmma needs 32-byte aligned tiles
  mma::Accumulator acc;
  mma::zero(acc);
  mma::multiply_add(acc, fa, mma::FragmentB<mma::RowMajor>{});
  mma::store(c, acc, 16);
}

TEST_P(MmaEmulation, MisalignedTilePointerThrows) {
  OrderScope order(GetParam());
  std::vector<bf16> a(17 * 16, bf16_from_float(1.0f));
  std::vector<float> c(256);
  const std::string err = ErrorOf([&] {
    tarn::launch(load_misaligned, 1, 32, mma::kSharedSlack + 17 * 16 * sizeof(bf16), nullptr, a.data(), c.data());
  });
  EXPECT_NE(err.find("not 32-byte aligned"), std::string::npos) << err;
}

TEST(Bf16, ConversionsRoundToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f).bits, 0x3f80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_from_float(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(bf16_from_float(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(bf16_from_float(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits, 0x3f81);
  EXPECT_EQ(bf16_from_float(-2.5f).bits, 0xc020);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(std::nanf("")))));
  EXPECT_TRUE(std::isinf(bf16_to_float(bf16_from_float(3.4e38f))));
  for (float x : {0.1f, -3.7f, 1e-20f, 65504.0f}) EXPECT_LE(std::fabs(bf16_round(x) - x), std::fabs(x) * 0x1p-8f);  // half an ulp of 7 mantissa bits
}

INSTANTIATE_TEST_SUITE_P(AllOrders, MmaEmulation, ::testing::ValuesIn(kAllOrders), OrderName);

}  // namespace
}  // namespace tarn::emu::testing
