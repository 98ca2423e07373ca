#pragma once
// Routed cross-attention's two reads for `tarn bench attention` (routed_cross, routed_tree), apart from
// bench_attention.cpp: the elementwise ops' `log` and the logger's namespace `log` cannot meet
// in one file.
#include <cstdint>

#include "framework/tensor.h"

namespace tarn::app {

// q (B, H, Nq, d) over the source k, v (B, H, Nk, d), unpadded: the selected and compressed
// reads of layers/attention/routed.h, in f32, summed (the gate's mix aside); root > 0: a tree of
// landmarks as deep as this source needs for at most `root` at the top, `beam` chosen at each level
// above the keys' chunks.
Tensor routed_reads_summed(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk, int64_t top,
                           int64_t root, int64_t beam);

}  // namespace tarn::app
