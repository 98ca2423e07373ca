#pragma once
// Threading policy shared by the CPU kernels. One OpenMP pool serves our loops and OpenBLAS
// (the OpenMP build), so setting the thread count here sets it for both.
#include <cstdint>

namespace tarn::kernels {

// Elements below which an elementwise loop stays on one thread: thread wake-up costs ~2-5 us,
// about as long as streaming 32K floats.
constexpr int64_t kParallelGrain = 32768;

void set_num_threads(int n);
int num_threads();

}  // namespace tarn::kernels
