#pragma once
// Internals of the CPU linear-attention kernels, shared by linear_attention.cpp (entry
// points and threading), linear_attention_chunks.cpp (chunk loaders), _causal.cpp (the
// chunked scan and its two backward scans) and _bidirectional.cpp (docs/design.md section 2).
//
// Per (batch, head) slice, with chunks of C rows, padded tiles in a per-thread workspace:
//   a: C x dp   b: C x dp   bt = b^T: dp x C   v: C x ep   vt = v^T: ep x C
//   gu: C x ep (dO / (den + eps))   ge: C (-(dO . out) / (den + eps))
//   p, dd: C x C (masked a b^T and g v'^T)   s, st, s2: d x e state tiles
// where dp, ep, C are rounded up to the SIMD width. The ones column of V' = [V | 1] is
// carried separately as the vectors z = sum b_j and ge (same maths, fewer padded columns).
#include <cstdint>

#include "kernels/cpu/linear_attention_simd.h"
#include "kernels/linear_attention.h"

namespace tarn::kernels::cpu::linear_attention_detail {

using simd::Arena;

struct Geometry {
  int64_t batch, heads, n_q, n_k, d, e;
  int64_t chunk;       // rows per chunk, never more than the longest sequence
  int64_t dp, ep, cp;  // d, e, chunk rounded up to the SIMD width
};

enum class Pass { forward, backward };

// One thread's tiles. Forward uses a, b, bt, v, p, tile_e, s, z; backward all of them.
struct Buffers {
  float *a, *b, *bt, *v, *vt, *gu, *ge, *p, *dd, *tile_d, *tile_e, *s, *st, *s2, *z, *z2;
  Buffers(Arena& ar, const Geometry& geo, Pass pass) {
    const bool bwd = pass == Pass::backward;
    a = ar.take(geo.cp * geo.dp);
    b = ar.take(geo.cp * geo.dp);
    bt = ar.take(geo.dp * geo.cp);
    v = ar.take(geo.cp * geo.ep);
    p = ar.take(geo.cp * geo.cp);
    tile_e = ar.take(geo.cp * geo.ep);
    s = ar.take(geo.dp * geo.ep);
    z = ar.take(geo.dp);
    vt = bwd ? ar.take(geo.ep * geo.cp) : nullptr;
    gu = bwd ? ar.take(geo.cp * geo.ep) : nullptr;  // G without its last column (that is ge)
    ge = bwd ? ar.take(geo.cp) : nullptr;
    dd = bwd ? ar.take(geo.cp * geo.cp) : nullptr;
    tile_d = bwd ? ar.take(geo.cp * geo.dp) : nullptr;
    st = bwd ? ar.take(geo.ep * geo.dp) : nullptr;
    s2 = bwd ? ar.take(geo.ep * geo.dp) : nullptr;
    z2 = bwd ? ar.take(geo.dp) : nullptr;
  }
};

inline int64_t per_thread_floats(const Geometry& geo, Pass pass) {
  Arena counter(nullptr);
  Buffers unused(counter, geo, pass);
  return counter.used();
}

// One (batch, head) slice of every tensor.
struct Slice {
  const float *a, *b, *v, *out, *den, *dout;
  const float* pad;  // (n_k) key padding flags or null
  float *out_w, *den_w, *da, *db, *dv;
};

// ---- chunk loaders and helpers (linear_attention_chunks.cpp) ----

void load_features(const Geometry& geo, FeatureMap phi, const float* src, const float* pad,
                   int64_t r0, int64_t r, float* dst);
void load_values(const Geometry& geo, const float* v, int64_t r0, int64_t r, float* dst);
void load_g(const Geometry& geo, const Slice& slice, float eps, int64_t r0, int64_t r, float* gt,
            float* ge);
void add_column_sums(const Geometry& geo, const float* x, int64_t r, float* z);
void add_weighted_rows(const Geometry& geo, const float* x, const float* w, int64_t r, float* z);
void write_output(const Geometry& geo, const float* u, int64_t ldu, const float* den, float eps,
                  int64_t r, float* out);
const float* values_operand(const Geometry& geo, const float* v, int64_t r0, int64_t r, float* tile);
float* values_target(const Geometry& geo, float* out, int64_t r0, float* tile);
void write_key_grad(const Geometry& geo, FeatureMap phi, const Slice& slice, int64_t r0, int64_t r,
                    const float* tile);
void masked_g_vt(const Geometry& geo, const Buffers& w, int64_t r, int64_t rp);

// ---- per-slice passes ----

// linear_attention_causal.cpp. Each scan runs over the chunk-aligned rows [begin, end) of
// the slice (all of them unsplit; one segment of them when a sequence is split across
// threads) and starts from the carried state of the rows outside it that it depends on:
// S' = sum b_j v'_j^T of the earlier rows for the forward scans, R' = sum a_i g'_i^T of the
// later rows for the reverse scan, both as S (dp x ep) and z (dp, the ones column); null
// for zeros.
struct RowRange {
  int64_t begin, end;
};
struct ScanState {
  const float* s = nullptr;
  const float* z = nullptr;
};
// Floats of one ScanState in a workspace (S then z, 64-byte aligned).
inline int64_t scan_state_floats(const Geometry& geo) { return geo.dp * geo.ep + geo.dp; }

void causal_forward_slice(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                          const Buffers& w, RowRange rows, ScanState start);
void causal_backward_da(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                        const Buffers& w, RowRange rows, ScanState start);
void causal_backward_db_dv(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                           const Buffers& w, RowRange rows, ScanState start);
// Pass 1 of a split sequence: the state a segment of rows hands on (overwrites S and z), the
// forward scans' S' (needs s.b, s.v, s.pad) and the reverse scan's R' (s.a, s.out, s.den,
// s.dout).
void causal_key_value_sum(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                          const Buffers& w, RowRange rows, float* S, float* z);
void causal_query_grad_sum(const Geometry& geo, const LinearAttentionConfig& cfg, const Slice& slice,
                           const Buffers& w, RowRange rows, float* R, float* re);
// linear_attention_bidirectional.cpp
void bidirectional_forward_slice(const Geometry& geo, const LinearAttentionConfig& cfg,
                                 const Slice& slice, const Buffers& w);
void bidirectional_backward_slice(const Geometry& geo, const LinearAttentionConfig& cfg,
                                  const Slice& slice, const Buffers& w);

}  // namespace tarn::kernels::cpu::linear_attention_detail
