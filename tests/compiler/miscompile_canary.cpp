// Code that compilers are known to have got wrong under some flags, each checked against the
// value the source says. CMake builds and runs it at configure time with the flags it is about
// to use (cmake/TarnArchFlags.cmake) and falls back to safe ones if anything here fails; the
// ctest `compiler_canary` runs the same program built like the rest of tarn, so that a build
// whose flags were forced (-DTARN_ARCH_FLAGS=...) onto a bad compiler says so.
//
// Exit status: 0 when every pattern holds, 1 otherwise (each failure named on stdout).
//
// Pattern 1 (GCC 12.2, Debian 12): a constant of 32 or more bytes whose tail is zeros, stored
// "by pieces" with 256-bit vectors, becomes a broadcast of its first element:
// `std::vector<float>{1,1,1,1,1,1,0,0}` holds eight ones. It needs AVX-512 on (-march=native on
// an AVX-512 CPU, -march=x86-64-v4, -mavx512f) or Intel server tuning (-mtune=icelake-server,
// sapphirerapids: their avx256_store_by_pieces), at -O2 and above. -march=x86-64-v3 with
// generic tuning is right; so is clang 14. The variants below were each seen wrong.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// noinline and external: each pattern is compiled on its own, as in a real caller, and GCC
// inlines the vector's constructor into it (inside an anonymous namespace it did not, and the
// first three patterns then came out right under flags that break them in tarn's code).
#define CANARY_NOINLINE __attribute__((noinline))

CANARY_NOINLINE std::vector<float> float_ones_then_zeros() { return {1, 1, 1, 1, 1, 1, 0, 0}; }
CANARY_NOINLINE std::vector<float> sixteen_floats_zero_tail() { return {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}; }
CANARY_NOINLINE std::vector<double> doubles_zero_tail() { return {3, 3, 3, 0}; }
CANARY_NOINLINE void copy_local_array(float* out) {
  const float mask[8] = {1, 1, 1, 1, 1, 1, 0, 0};
  std::memcpy(out, mask, sizeof mask);
}
struct Eight {
  float v[8];
};
CANARY_NOINLINE void assign_aggregate(Eight* out) { *out = Eight{{1, 1, 1, 1, 1, 1, 0, 0}}; }
CANARY_NOINLINE std::vector<int32_t> ints_last_differs() { return {4, 4, 4, 4, 4, 4, 4, 9}; }
CANARY_NOINLINE std::vector<float> zeros_then_ones() { return {0, 0, 1, 1, 1, 1, 1, 1}; }

namespace {

template <class Container>
std::string render(const Container& values) {
  std::string s;
  char buf[32];
  for (auto x : values) {
    std::snprintf(buf, sizeof buf, "%s%g", s.empty() ? "" : " ", static_cast<double>(x));
    s += buf;
  }
  return s;
}

int failures = 0, checked = 0;

void expect(const char* pattern, const std::string& got, const char* want) {
  ++checked;
  if (got == want) return;
  ++failures;
  std::printf("MISCOMPILED %s: got {%s}, the source says {%s}\n", pattern, got.c_str(), want);
}

}  // namespace

int main() {
  expect("std::vector<float>{1,1,1,1,1,1,0,0}", render(float_ones_then_zeros()), "1 1 1 1 1 1 0 0");
  expect("std::vector<float> of 16, zero tail", render(sixteen_floats_zero_tail()),
         "1 1 1 1 1 1 1 1 1 1 1 1 1 1 0 0");
  expect("std::vector<double>{3,3,3,0}", render(doubles_zero_tail()), "3 3 3 0");
  {
    std::vector<float> out(8, -1.0f);
    copy_local_array(out.data());
    expect("memcpy of a local const float[8]", render(out), "1 1 1 1 1 1 0 0");
  }
  {
    Eight e{};
    assign_aggregate(&e);
    expect("aggregate assignment of float[8]", render(std::vector<float>(e.v, e.v + 8)), "1 1 1 1 1 1 0 0");
  }
  expect("std::vector<int32_t>{4,...,4,9}", render(ints_last_differs()), "4 4 4 4 4 4 4 9");
  expect("std::vector<float>{0,0,1,...}", render(zeros_then_ones()), "0 0 1 1 1 1 1 1");
  std::printf("%d of %d patterns miscompiled\n", failures, checked);
  return failures == 0 ? 0 : 1;
}
