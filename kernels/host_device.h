#pragma once
// TARN_HOST_DEVICE marks a small function that the CPU kernels and the CUDA kernels both call,
// so that the two backends share one definition: __host__ __device__ under nvcc, a plain
// inline function for g++ (the CPU build, and the CUDA sources built against the emulator).
#if defined(__CUDACC__)
#define TARN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TARN_HOST_DEVICE inline
#endif
