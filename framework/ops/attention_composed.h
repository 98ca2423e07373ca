#pragma once
// Attention built from matmul, softmax and elementwise ops, for devices whose kernel table has
// no fused version (private to framework/ops; attention.cpp decides when to use them).
#include "framework/ops/attention.h"

namespace tarn::ops_internal {

// feature_map() of x on a non-CPU device for a row-local map (identity returns x).
Tensor feature_map_off_host(const Tensor& x, FeatureMap kind, FeatureRole role, const Tensor& projection);

// softmax_attention() with an N x N score matrix.
Tensor softmax_attention_composed(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const SoftmaxAttentionOptions& opt);

}  // namespace tarn::ops_internal
