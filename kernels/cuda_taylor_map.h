#pragma once
// The Taylor feature map (kernels/taylor_map.h) on CUDA (kernels/cuda/taylor_map.cu), in the two
// namespaces that kernels/cuda_kernels.h describes: the same semantics, shapes and argument
// order as the CPU functions; feature counts above kMaxTaylorFeatures are refused.
#include "kernels/cuda_api.h"
#include "kernels/taylor_map.h"

#define TARN_CUDA_TAYLOR_MAP_API                                                                   \
  using cpu::TaylorMapDims;                                                                        \
  void taylor_map_forward(const TaylorMapDims& dims, const float* p, float* phi);                  \
  void taylor_map_backward(const TaylorMapDims& dims, const float* p, const float* d_phi, float* dp);

TARN_DECLARE_CUDA_API(TARN_CUDA_TAYLOR_MAP_API)

#undef TARN_CUDA_TAYLOR_MAP_API
