// The register-resident tensor-core instructions (kernels/cuda/warp_mma.cuh: mma.sync m16n8k16,
// ldmatrix) and asynchronous copies (kernels/cuda/async_copy.cuh: cp.async) on the emulator and,
// where there is one, on a GPU:
//   - which element of a tile each lane holds, against tables copied from the PTX ISA's figures
//     (one warp's registers read back through kernels/cuda_fragment_probe.h), in every thread
//     order and on the hardware (the Gpu target), so the emulator's map is the GPU's;
//   - the emulator's rules for cp.async: data not visible before its wait_group, groups
//     completing oldest first, zero fill, and the misuses it reports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/warp_mma.cuh"
#include "kernels/cuda_fragment_probe.h"
#include "kernels/emu/bf16.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/emu_test_util.h"

namespace tarn::cuda_testing {
namespace {

namespace wm = ::tarn::kernels::cuda_emu::warp_mma;

// The PTX ISA's fragment figures ("Matrix Fragments for mma.m16n8k16 with floating point type",
// and ldmatrix's "fragment layout for one 8x8 matrix with 16-bit elements"), cell by cell: which
// lane holds element (row, column) of the tile, and as which of its elements (a0..a7, b0..b3,
// c0..c3; element e sits in register e / 2, bits 16 (e % 2) and up for bf16).
struct Figure {
  int rows, cols;
  std::vector<int> lane, element;  // row-major
};

std::vector<int> ParseGrid(const std::vector<std::string>& lines) {
  std::vector<int> out;
  for (const std::string& line : lines) {
    size_t pos = 0;
    while (pos < line.size()) {
      size_t used = 0;
      out.push_back(std::stoi(line.substr(pos), &used));
      pos += used;
      while (pos < line.size() && line[pos] == ' ') ++pos;
    }
  }
  return out;
}

Figure MakeFigure(int rows, int cols, const std::vector<std::string>& lanes, const std::vector<std::string>& elements) {
  Figure f{rows, cols, ParseGrid(lanes), ParseGrid(elements)};
  EXPECT_EQ(f.lane.size(), static_cast<size_t>(rows * cols));
  EXPECT_EQ(f.element.size(), static_cast<size_t>(rows * cols));
  return f;
}

// A: 16 x 16 bf16, row-major ("row" in mma.sync's .row.col).
const Figure& FigureA() {
  static const Figure f = MakeFigure(16, 16, {
    " 0  0  1  1  2  2  3  3  0  0  1  1  2  2  3  3",
    " 4  4  5  5  6  6  7  7  4  4  5  5  6  6  7  7",
    " 8  8  9  9 10 10 11 11  8  8  9  9 10 10 11 11",
    "12 12 13 13 14 14 15 15 12 12 13 13 14 14 15 15",
    "16 16 17 17 18 18 19 19 16 16 17 17 18 18 19 19",
    "20 20 21 21 22 22 23 23 20 20 21 21 22 22 23 23",
    "24 24 25 25 26 26 27 27 24 24 25 25 26 26 27 27",
    "28 28 29 29 30 30 31 31 28 28 29 29 30 30 31 31",
    " 0  0  1  1  2  2  3  3  0  0  1  1  2  2  3  3",
    " 4  4  5  5  6  6  7  7  4  4  5  5  6  6  7  7",
    " 8  8  9  9 10 10 11 11  8  8  9  9 10 10 11 11",
    "12 12 13 13 14 14 15 15 12 12 13 13 14 14 15 15",
    "16 16 17 17 18 18 19 19 16 16 17 17 18 18 19 19",
    "20 20 21 21 22 22 23 23 20 20 21 21 22 22 23 23",
    "24 24 25 25 26 26 27 27 24 24 25 25 26 26 27 27",
    "28 28 29 29 30 30 31 31 28 28 29 29 30 30 31 31",
  }, {
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 0  1  0  1  0  1  0  1  4  5  4  5  4  5  4  5",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
    " 2  3  2  3  2  3  2  3  6  7  6  7  6  7  6  7",
  });
  return f;
}

// B: 16 x 8 bf16 (k rows, n columns).
const Figure& FigureB() {
  static const Figure f = MakeFigure(16, 8, {
    " 0  4  8 12 16 20 24 28",
    " 0  4  8 12 16 20 24 28",
    " 1  5  9 13 17 21 25 29",
    " 1  5  9 13 17 21 25 29",
    " 2  6 10 14 18 22 26 30",
    " 2  6 10 14 18 22 26 30",
    " 3  7 11 15 19 23 27 31",
    " 3  7 11 15 19 23 27 31",
    " 0  4  8 12 16 20 24 28",
    " 0  4  8 12 16 20 24 28",
    " 1  5  9 13 17 21 25 29",
    " 1  5  9 13 17 21 25 29",
    " 2  6 10 14 18 22 26 30",
    " 2  6 10 14 18 22 26 30",
    " 3  7 11 15 19 23 27 31",
    " 3  7 11 15 19 23 27 31",
  }, {
    " 0  0  0  0  0  0  0  0",
    " 1  1  1  1  1  1  1  1",
    " 0  0  0  0  0  0  0  0",
    " 1  1  1  1  1  1  1  1",
    " 0  0  0  0  0  0  0  0",
    " 1  1  1  1  1  1  1  1",
    " 0  0  0  0  0  0  0  0",
    " 1  1  1  1  1  1  1  1",
    " 2  2  2  2  2  2  2  2",
    " 3  3  3  3  3  3  3  3",
    " 2  2  2  2  2  2  2  2",
    " 3  3  3  3  3  3  3  3",
    " 2  2  2  2  2  2  2  2",
    " 3  3  3  3  3  3  3  3",
    " 2  2  2  2  2  2  2  2",
    " 3  3  3  3  3  3  3  3",
  });
  return f;
}

// C and D: 16 x 8 f32.
const Figure& FigureC() {
  static const Figure f = MakeFigure(16, 8, {
    " 0  0  1  1  2  2  3  3",
    " 4  4  5  5  6  6  7  7",
    " 8  8  9  9 10 10 11 11",
    "12 12 13 13 14 14 15 15",
    "16 16 17 17 18 18 19 19",
    "20 20 21 21 22 22 23 23",
    "24 24 25 25 26 26 27 27",
    "28 28 29 29 30 30 31 31",
    " 0  0  1  1  2  2  3  3",
    " 4  4  5  5  6  6  7  7",
    " 8  8  9  9 10 10 11 11",
    "12 12 13 13 14 14 15 15",
    "16 16 17 17 18 18 19 19",
    "20 20 21 21 22 22 23 23",
    "24 24 25 25 26 26 27 27",
    "28 28 29 29 30 30 31 31",
  }, {
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
    " 2  3  2  3  2  3  2  3",
  });
  return f;
}

// ldmatrix: one 8 x 8 matrix of 16-bit elements; each lane holds two neighbours of a row.
const Figure& FigureLdmatrix() {
  static const Figure f = MakeFigure(8, 8, {
    " 0  0  1  1  2  2  3  3",
    " 4  4  5  5  6  6  7  7",
    " 8  8  9  9 10 10 11 11",
    "12 12 13 13 14 14 15 15",
    "16 16 17 17 18 18 19 19",
    "20 20 21 21 22 22 23 23",
    "24 24 25 25 26 26 27 27",
    "28 28 29 29 30 30 31 31",
  }, {
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
    " 0  1  0  1  0  1  0  1",
  });
  return f;
}

// Where (row, column) of a figure's tile lane `lane` keeps its element `e`; fails if the figure
// gives it none or two.
std::pair<int, int> CellOf(const Figure& f, int lane, int e) {
  std::pair<int, int> cell{-1, -1};
  int found = 0;
  for (int r = 0; r < f.rows; ++r)
    for (int c = 0; c < f.cols; ++c)
      if (f.lane[r * f.cols + c] == lane && f.element[r * f.cols + c] == e) {
        cell = {r, c};
        ++found;
      }
  EXPECT_EQ(found, 1) << "lane " << lane << " element " << e;
  return cell;
}

TEST(WarpMmaFigures, EveryCellHasOneOwnerAndEveryLaneItsShare) {
  struct Named {
    const char* name;
    const Figure* f;
    int per_lane;
  };
  for (const Named& n : {Named{"A", &FigureA(), 8}, Named{"B", &FigureB(), 4}, Named{"C", &FigureC(), 4},
                         Named{"ldmatrix", &FigureLdmatrix(), 2}}) {
    SCOPED_TRACE(n.name);
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < n.per_lane; ++e) CellOf(*n.f, lane, e);
  }
}

// The emulator's map (warp_mma::a_row ... c_col, what its mma.sync runs by) is the figures'.
TEST(WarpMmaFigures, TheEmulatorsMapIsThePtxTable) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e)
      EXPECT_EQ(CellOf(FigureA(), lane, e), std::make_pair(wm::a_row(lane, e), wm::a_col(lane, e))) << lane << " a" << e;
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(CellOf(FigureB(), lane, e), std::make_pair(wm::b_row(lane, e), wm::b_col(lane, e))) << lane << " b" << e;
      EXPECT_EQ(CellOf(FigureC(), lane, e), std::make_pair(wm::c_row(lane, e), wm::c_col(lane, e))) << lane << " c" << e;
    }
  }
}

// accumulator_to_a packs (left c0, c1), (left c2, c3), (right c0, c1), (right c2, c3): by the
// figures that is A's element e, for the 16 x 16 product whose columns 0-7 are `left`.
TEST(WarpMmaFigures, TwoAccumulatorsArePlacedAsTheAOperand) {
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 8; ++e) {
      const int tile = e / 4, ce = e % 4;  // accumulator_to_a: register e / 2 from tile e / 4
      auto [r, c] = CellOf(FigureC(), lane, ce);
      EXPECT_EQ(CellOf(FigureA(), lane, e), std::make_pair(r, c + 8 * tile)) << lane << " a" << e;
    }
}

uint16_t Bits(float x) { return bf16_from_float(x).bits; }
float Value(uint32_t reg, int half) { return bf16_to_float(bf16{static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffff)}); }

class WarpMmaFragments : public Conformance {
 protected:
  struct Probe {
    std::vector<uint32_t> loaded;
    std::vector<float> d;
  };
  Probe Run(const std::vector<uint16_t>& tile, const std::vector<int>& lane_rows, const std::vector<uint32_t>& a,
            const std::vector<uint32_t>& b, const std::vector<float>& c) {
    auto tile_d = dev(tile);
    auto rows_d = dev(lane_rows);
    auto a_d = dev(a);
    auto b_d = dev(b);
    auto c_d = dev(c);
    DeviceArray<uint32_t> loaded_d(target(), 32 * kernels::kFragmentProbeRegisters, 0xdeadbeefu);
    auto d_d = out(32 * 4);
    TARN_ON(target(), fragment_probe, tile_d.get(), rows_d.get(), a_d.get(), b_d.get(), c_d.get(), loaded_d.get(),
            d_d.get());
    return Probe{loaded_d.host(), d_d.host()};
  }
};

// The tile's element (r, c) is the number 16 r + c (exact in bf16); lane l points at row l % 16,
// columns 8 (l / 16) on: the four 8 x 8 quadrants in the order (rows 0-7, cols 0-7), (8-15,
// 0-7), (0-7, 8-15), (8-15, 8-15), as a kernel loads an A tile.
TEST_P(WarpMmaFragments, LdmatrixGivesEachLaneThePtxTablesElements) {
  std::vector<uint16_t> tile(256);
  for (int i = 0; i < 256; ++i) tile[i] = Bits(static_cast<float>(i));
  std::vector<int> lane_rows(32);
  for (int l = 0; l < 32; ++l) lane_rows[l] = (l % 16) * 16 + 8 * (l / 16);
  const Probe p = Run(tile, lane_rows, std::vector<uint32_t>(128), std::vector<uint32_t>(64), std::vector<float>(128));
  // (first register in the probe's output, matrices, transposed)
  struct Form {
    const char* name;
    int first, count;
    bool trans;
  };
  const Figure& f = FigureLdmatrix();
  for (const Form& form : {Form{"x1", 0, 1, false}, Form{"x2", 1, 2, false}, Form{"x4", 3, 4, false},
                           Form{"x1.trans", 7, 1, true}, Form{"x2.trans", 8, 2, true}, Form{"x4.trans", 10, 4, true}}) {
    for (int lane = 0; lane < 32; ++lane)
      for (int m = 0; m < form.count; ++m)
        for (int h = 0; h < 2; ++h) {
          auto [r, c] = CellOf(f, lane, h);
          if (form.trans) std::swap(r, c);  // .trans delivers the stored matrix's transpose
          const int row0 = 8 * (m % 2), col0 = 8 * (m / 2);  // matrix m's quadrant
          const float want = static_cast<float>(16 * (row0 + r) + col0 + c);
          const uint32_t reg = p.loaded[lane * kernels::kFragmentProbeRegisters + form.first + m];
          EXPECT_EQ(Value(reg, h), want) << "ldmatrix." << form.name << " lane " << lane << " matrix " << m << " half "
                                         << h;
        }
  }
}

// Each lane's registers are filled from random A, B, C by the figures; D must come back where the
// C figure says, equal to C + A B.
TEST_P(WarpMmaFragments, MmaReadsAndWritesThePtxTablesElements) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(16 * 16), b(16 * 8), c(16 * 8);
  for (float& x : a) x = bf16_round(dist(gen));
  for (float& x : b) x = bf16_round(dist(gen));
  for (float& x : c) x = dist(gen);
  std::vector<uint32_t> a_regs(32 * 4), b_regs(32 * 2);
  std::vector<float> c_regs(32 * 4);
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      auto [r, col] = CellOf(FigureA(), lane, e);
      a_regs[lane * 4 + e / 2] |= static_cast<uint32_t>(Bits(a[r * 16 + col])) << (16 * (e % 2));
    }
    for (int e = 0; e < 4; ++e) {
      auto [k, n] = CellOf(FigureB(), lane, e);
      b_regs[lane * 2 + e / 2] |= static_cast<uint32_t>(Bits(b[k * 8 + n])) << (16 * (e % 2));
      auto [r, col] = CellOf(FigureC(), lane, e);
      c_regs[lane * 4 + e] = c[r * 8 + col];
    }
  }
  std::vector<int> lane_rows(32, 0);
  const Probe p = Run(std::vector<uint16_t>(256, 0), lane_rows, a_regs, b_regs, c_regs);
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      auto [r, col] = CellOf(FigureC(), lane, e);
      double want = c[r * 8 + col], magnitude = std::fabs(want);
      for (int k = 0; k < 16; ++k) {
        want += static_cast<double>(a[r * 16 + k]) * b[k * 8 + col];
        magnitude += std::fabs(static_cast<double>(a[r * 16 + k]) * b[k * 8 + col]);
      }
      // bf16 products are exact; the tensor cores' f32 sum of 17 terms rounds within ~17 u.
      EXPECT_NEAR(p.d[lane * 4 + e], want, 17 * 0x1p-23 * magnitude + 1e-30) << "lane " << lane << " c" << e;
    }
}

INSTANTIATE_TEST_SUITE_P(Targets, WarpMmaFragments, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
