// The FAVOR+ feature map on bf16 queries and keys (kernels/cuda_linear_attention_bf16.h), for
// the bf16 attention kernels with feature_map identity. favor is not row-local (every feature
// needs the whole projected row, docs/design.md section 2), so it is the f32 favor_forward /
// favor_backward of linear_attention_favor.cu (projection GEMM, then the stabilised exp fused
// in one row-wise pass) between two conversions (kernels/cuda/cast.cu): bf16 inputs widened to f32 in
// the workspace, f32 results rounded to bf16. The projection and exp run in f32 on the exact
// bf16 values, so the only rounding this adds is the final one of y (or dx) to bf16; the
// projection W stays f32 (a parameter, not an activation).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_linear_attention_bf16.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::FavorDims;
using cpu::FavorStabilizer;
void check_dims(const char* op, const FavorDims& g) {
  TARN_ASSERT(g.slices >= 0 && g.rows >= 0 && g.d > 0 && g.m > 0, op, ": bad dims (slices ", g.slices, ", rows ",
              g.rows, ", d ", g.d, ", m ", g.m, ")");
}

void check_workspace(const char* op, const float* workspace, size_t have, size_t need) {
  TARN_ASSERT(need == 0 || (workspace && have >= need), op, ": workspace of ", have, " floats is smaller than the ",
              need, " it needs");
}

}  // namespace

size_t favor_forward_bf16_workspace_floats(const FavorDims& g) {
  check_dims("favor_forward_bf16", g);
  return static_cast<size_t>(g.slices * g.rows * (g.d + g.m));  // x, then y, in f32
}

void favor_forward_bf16(const FavorDims& g, FavorStabilizer stab, const ::tarn::bf16* x, const float* w,
                        ::tarn::bf16* y, float* workspace, size_t workspace_floats) {
  const char* op = "favor_forward_bf16";
  check_workspace(op, workspace, workspace_floats, TARN_CUDA_NS::favor_forward_bf16_workspace_floats(g));
  const int64_t rows = g.slices * g.rows;
  if (rows == 0) return;
  float* x32 = workspace;
  float* y32 = x32 + rows * g.d;
  cast_from_bf16(x, x32, rows * g.d);
  TARN_CUDA_NS::favor_forward(g, stab, x32, w, y32);  // qualified: cpu:: is found through g too
  cast_to_bf16(y32, y, rows * g.m);
}

size_t favor_backward_bf16_workspace_floats(const FavorDims& g) {
  check_dims("favor_backward_bf16", g);
  // x and dx (d each), y and dy (m each) in f32, then favor_backward's own workspace.
  return static_cast<size_t>(g.slices * g.rows * 2 * (g.d + g.m)) + TARN_CUDA_NS::favor_backward_workspace_floats(g);
}

void favor_backward_bf16(const FavorDims& g, FavorStabilizer stab, const ::tarn::bf16* x, const float* w,
                         const ::tarn::bf16* y, const ::tarn::bf16* dy, ::tarn::bf16* dx, float* workspace,
                         size_t workspace_floats) {
  const char* op = "favor_backward_bf16";
  const size_t need = TARN_CUDA_NS::favor_backward_bf16_workspace_floats(g);
  check_workspace(op, workspace, workspace_floats, need);
  const int64_t rows = g.slices * g.rows;
  if (rows == 0) return;
  float* x32 = workspace;
  float* dx32 = x32 + rows * g.d;
  float* y32 = dx32 + rows * g.d;
  float* dy32 = y32 + rows * g.m;
  float* inner = dy32 + rows * g.m;
  cast_from_bf16(x, x32, rows * g.d);
  cast_from_bf16(y, y32, rows * g.m);
  cast_from_bf16(dy, dy32, rows * g.m);
  TARN_CUDA_NS::favor_backward(g, stab, x32, w, y32, dy32, dx32, inner,
                               TARN_CUDA_NS::favor_backward_workspace_floats(g));
  cast_to_bf16(dx32, dx, rows * g.d);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
