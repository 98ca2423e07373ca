#pragma once
// Feature maps phi for linear attention (docs/design.md section 2), applied row-wise to the
// queries and keys of one head: x (rows, d) -> phi(x) (rows, d), or (rows, m) for favor.
//
//   elu1      phi(x) = elu(x) + 1                    (the default; positive, so den > 0)
//   relu      phi(x) = max(x, 0)
//   exp       phi(x) = exp(x - max_k x_k), per row   (the max is differentiated through)
//   identity  phi(x) = x                             (ablations only: degenerates to mean
//                                                     pooling, the op layer warns)
//   favor     phi(x) = exp(W x' - |x'|^2 / 2 - s) / sqrt(m),  x' = d^(-1/4) x,
//             W (m, d) block-orthogonal Gaussian (Choromanski et al. 2021, FAVOR+), so that
//             E[phi(q) . phi(k)] = exp(q . k / sqrt(d)) when s = 0. The stabiliser s keeps
//             exp in range; see FavorStabilizer.
//
// All but favor are row-local and elementwise-cheap: the linear-attention kernel can apply
// them itself while loading a chunk (LinearAttentionConfig::feature_map), so phi(Q), phi(K)
// and their gradients are never materialised.
#include <cstddef>
#include <cstdint>

namespace tarn::kernels::cpu {

// taylor (Based's second-order Taylor map of exp(q.k)) and hedgehog (Hedgehog's learned
// softmax map) have learned projections, so the layer computes them from differentiable ops
// (layers/attention/feature_map.h); no kernel applies them.
enum class FeatureMap : uint8_t { elu1, relu, exp, favor, identity, taylor, hedgehog };

// "elu1", "relu", "exp", "favor", "identity", "taylor", "hedgehog": the recipe's names. Inline, so that code which
// only names maps (the recipe's schema, its fuzzer) needs none of the kernels.
inline const char* feature_map_name(FeatureMap kind) {
  switch (kind) {
    case FeatureMap::elu1: return "elu1";
    case FeatureMap::relu: return "relu";
    case FeatureMap::exp: return "exp";
    case FeatureMap::favor: return "favor";
    case FeatureMap::identity: return "identity";
    case FeatureMap::taylor: return "taylor";
    case FeatureMap::hedgehog: return "hedgehog";
  }
  return "?";
}
// Maps with parameters of the attention layer (taylor, hedgehog): only the layer computes them.
inline bool feature_map_is_learned(FeatureMap kind) { return kind == FeatureMap::taylor || kind == FeatureMap::hedgehog; }
// Every map but favor and the learned ones depends on one row only and keeps the dimension d.
inline bool feature_map_is_row_local(FeatureMap kind) {
  return kind != FeatureMap::favor && !feature_map_is_learned(kind);
}

// Row-local maps on strided rows: y (rows, d; ldy) = phi(x (rows, d; ldx)). Single-threaded
// (the attention kernel calls it per chunk inside its parallel region).
void feature_map_rows_forward(FeatureMap kind, int64_t rows, int64_t d, const float* x,
                              int64_t ldx, float* y, int64_t ldy);
// dx = J_phi(x)^T dy, recomputing phi from x. dx may alias dy (same ld).
void feature_map_rows_backward(FeatureMap kind, int64_t rows, int64_t d, const float* x,
                               int64_t ldx, const float* dy, int64_t lddy, float* dx,
                               int64_t lddx);

// Contiguous (rows, d) tensors, parallel over rows. Row-local maps only.
void feature_map_forward(FeatureMap kind, int64_t rows, int64_t d, const float* x, float* y);
void feature_map_backward(FeatureMap kind, int64_t rows, int64_t d, const float* x,
                          const float* dy, float* dx);

// ---- FAVOR+ ----

// What the favor map subtracts before exp. It scales phi rows by exp(-s):
//   per_row    s_i = max_j t_ij for each row: cancels exactly between the numerator and the
//              denominator of a query's output, so use it for queries;
//   per_slice  one s per (batch, head) slice, the max over all its rows and features: a
//              common factor of all keys, so it cancels in every output too (up to eps);
//              use it for keys (a per-row key max would reweight the keys);
//   none       s = 0: the unbiased estimator of exp(q . k / sqrt(d)); may overflow.
// The max is differentiated through (gradient to the argmax element), so backward is the
// exact derivative of the function computed.
enum class FavorStabilizer : uint8_t { none, per_row, per_slice };

struct FavorDims {
  int64_t slices = 1;  // independent (batch, head) slices
  int64_t rows = 0;    // rows per slice
  int64_t d = 0;       // input dimension
  int64_t m = 0;       // random features
};

// x (slices, rows, d), w (m, d) -> y (slices, rows, m).
void favor_forward(const FavorDims& dims, FavorStabilizer stab, const float* x, const float* w,
                   float* y);

// dx (slices, rows, d) from y (the forward output) and dy (slices, rows, m). No gradient for
// w: the projection is a random buffer, not a parameter.
size_t favor_backward_workspace_floats(const FavorDims& dims);
void favor_backward(const FavorDims& dims, FavorStabilizer stab, const float* x,
                    const float* w, const float* y, const float* dy, float* dx,
                    float* workspace, size_t workspace_floats);

// The block-orthogonal projection from standard normal draws (the caller draws them from
// its tarn::Philox so that the projection is reproducible and checkpointable):
// ceil(m / d) blocks of d x d Gaussians are orthonormalised by rows (Gram-Schmidt in double),
// stacked and cut to m rows, and row i is scaled by the norm of a fresh Gaussian d-vector,
// so that every row is marginally N(0, I_d) while rows within a block stay orthogonal.
size_t favor_projection_normal_count(int64_t m, int64_t d);
void favor_projection_from_normals(int64_t m, int64_t d, const float* normals, float* w);

}  // namespace tarn::kernels::cpu
