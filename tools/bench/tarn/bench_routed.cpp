#include "tools/bench/tarn/bench_routed.h"

#include <cmath>

#include "framework/ops/elementwise.h"
#include "layers/attention/routed.h"

namespace tarn::app {

Tensor routed_reads_summed(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk, int64_t top,
                           int64_t root, int64_t beam) {
  const RoutedReads r = routed_reads(q, routed_source(k, v, Tensor(), chunk, routed_levels(chunk, root, k.size(2))),
                                     chunk, top, beam, 1.0f / std::sqrt(static_cast<float>(q.size(3))), Precision::f32);
  return add(r.selected, r.compressed);
}

}  // namespace tarn::app
