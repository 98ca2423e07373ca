// Linear attention on the CPU: argument checks, the per-thread workspace, the parallel loop
// over (batch, head) slices and the entry points of kernels/linear_attention.h. The passes
// themselves live in linear_attention_causal.cpp and linear_attention_bidirectional.cpp.
#include "kernels/linear_attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "kernels/check.h"
#include "kernels/cpu/linear_attention_internal.h"

namespace tarn::kernels::cpu {

using namespace linear_attention_detail;
using simd::padded;

namespace {

// linear_attention_set_cpu_sequence_split: 0 = automatic, 1 = never, n = n segments.
std::atomic<int> forced_sequence_segments{0};

Geometry make_geometry(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  Geometry geo{dims.batch, dims.heads, dims.n_q, dims.n_k, dims.d, dims.e, 0, 0, 0, 0};
  // A short sequence (an 18-token sentence) gets an 18-row chunk, not a padded 64-row one.
  geo.chunk = std::max<int64_t>(1, std::min<int64_t>(cfg.chunk, std::max(dims.n_q, dims.n_k)));
  geo.dp = padded(geo.d);
  geo.ep = padded(geo.e);
  geo.cp = padded(geo.chunk);
  return geo;
}

void check_args(const char* op, const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  TARN_ASSERT(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
              ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q,
              ", Nk=", dims.n_k, ")");
  TARN_ASSERT(dims.d > 0 && dims.e > 0, op, ": feature dim d=", dims.d, " and value dim e=",
              dims.e, " must be positive");
  TARN_ASSERT(!cfg.causal || dims.n_q == dims.n_k, op, ": causal attention needs Nq == Nk, got Nq=",
              dims.n_q, " Nk=", dims.n_k);
  TARN_ASSERT(cfg.chunk > 0, op, ": chunk must be positive, got ", cfg.chunk);
  TARN_ASSERT(cfg.eps > 0.0f, op, ": eps must be positive, got ", cfg.eps);
  TARN_ASSERT(feature_map_is_row_local(cfg.feature_map), op, ": the ",
              feature_map_name(cfg.feature_map),
              " feature map cannot be fused; apply it first and pass identity");
}

// ---- driver ----

Slice slice_of(const Geometry& geo, const LinearAttentionConfig& cfg, int64_t bh, const float* a,
               const float* b, const float* v) {
  Slice slice{};
  slice.a = a + bh * geo.n_q * geo.d;
  slice.b = b + bh * geo.n_k * geo.d;
  slice.v = v + bh * geo.n_k * geo.e;
  slice.pad = cfg.key_padding_mask ? cfg.key_padding_mask + (bh / geo.heads) * geo.n_k : nullptr;
  return slice;
}

constexpr int64_t kMinWorkPerThread = int64_t{1} << 16;  // multiply-adds

// Threads worth using: no more than the slices, and one for tiny problems (a decoding step,
// a gradient check), where a parallel region costs more than it saves. The workspace
// queries size for this many, so a small B*H on a many-core machine allocates little.
int planned_threads(const Geometry& geo) {
  const int64_t slices = geo.batch * geo.heads;
  const int64_t work = slices * std::max(geo.n_q, geo.n_k) * geo.d * geo.e;
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({omp_get_max_threads(), slices, work / kMinWorkPerThread})));
}

// ---- one causal sequence split across threads ----
//
// When B*H < threads, each causal slice's rows are cut into `segments` chunk-aligned
// segments, as the CUDA kernels do: pass 1 sums the state each segment hands on (in
// parallel over slices x segments), pass 2 turns those into prefix (forward scans) or suffix
// (reverse scan) sums, pass 3 runs the ordinary scan over each segment from its starting
// state (in parallel again). Pass 1 costs about one more B^T V' product per row, so it pays
// only where threads would otherwise idle.
constexpr int64_t kMinChunksPerSegment = 2;

int64_t chunks_of(const Geometry& geo) { return (geo.n_q + geo.chunk - 1) / geo.chunk; }

int64_t planned_segments(const Geometry& geo, const LinearAttentionConfig& cfg) {
  const int64_t slices = geo.batch * geo.heads, chunks = chunks_of(geo);
  if (!cfg.causal || slices == 0 || chunks < 2) return 1;
  const int forced = forced_sequence_segments.load(std::memory_order_relaxed);
  if (forced > 0) return std::min<int64_t>(forced, chunks);
  const int64_t threads = omp_get_max_threads();
  if (slices >= threads) return 1;
  const int64_t work = slices * geo.n_q * geo.d * geo.e;
  const int64_t segments = std::min<int64_t>(
      {(threads + slices - 1) / slices, chunks / kMinChunksPerSegment,
       work / kMinWorkPerThread / slices});
  return std::max<int64_t>(1, segments);
}

int split_threads(const Geometry& geo, int64_t segments) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), geo.batch * geo.heads * segments)));
}

// Pass 1 keeps segments - 1 states per slice per scan direction (the last segment hands
// nothing on forwards, the first nothing backwards); backward keeps both directions.
int64_t split_state_floats(const Geometry& geo, Pass pass, int64_t segments) {
  const int64_t directions = pass == Pass::backward ? 2 : 1;
  return directions * geo.batch * geo.heads * (segments - 1) * scan_state_floats(geo);
}

size_t needed_workspace_floats(const Geometry& geo, const LinearAttentionConfig& cfg, Pass pass) {
  const int64_t segments = planned_segments(geo, cfg);
  if (segments > 1)
    return static_cast<size_t>(per_thread_floats(geo, pass) * split_threads(geo, segments) +
                               split_state_floats(geo, pass, segments));
  return static_cast<size_t>(per_thread_floats(geo, pass) * planned_threads(geo));
}

RowRange segment_rows(const Geometry& geo, int64_t segments, int64_t k) {
  const int64_t chunks = chunks_of(geo);
  return {std::min(geo.n_q, k * chunks / segments * geo.chunk),
          std::min(geo.n_q, (k + 1) * chunks / segments * geo.chunk)};
}

// The split plan that fits the workspace: segments (1 = run unsplit), threads, and where the
// segment states start (after the threads' buffers).
struct SplitPlan {
  int64_t segments = 1;
  int threads = 1;
  float* states = nullptr;
};

SplitPlan plan_split(const Geometry& geo, const LinearAttentionConfig& cfg, Pass pass,
                     float* workspace, size_t workspace_floats) {
  SplitPlan plan;
  const int64_t segments = planned_segments(geo, cfg);
  if (segments <= 1 || !workspace) return plan;
  const int64_t per_thread = per_thread_floats(geo, pass);
  const int64_t states = split_state_floats(geo, pass, segments);
  const int64_t fits = (static_cast<int64_t>(workspace_floats) - states) / per_thread;
  if (fits < 1) return plan;  // a workspace sized for the unsplit scan: run that
  plan.segments = segments;
  plan.threads = static_cast<int>(std::min<int64_t>(split_threads(geo, segments), fits));
  plan.states = workspace + plan.threads * per_thread;
  return plan;
}

// A segment state in the workspace: S (dp x ep) followed by z (dp).
struct StateSlot {
  float *s = nullptr, *z = nullptr;
  operator ScanState() const { return {s, z}; }
};

// The state slot j (0 .. segments - 2) of slice bh in direction `dir` (0, 1).
StateSlot state_slot(const Geometry& geo, const SplitPlan& plan, int dir, int64_t bh, int64_t j) {
  const int64_t sf = scan_state_floats(geo), per_dir = geo.batch * geo.heads * (plan.segments - 1);
  float* p = plan.states + (dir * per_dir + bh * (plan.segments - 1) + j) * sf;
  return {p, p + geo.dp * geo.ep};
}

// x += y, S and z together (z follows S in a slot).
void add_state(const Geometry& geo, const StateSlot& x, const StateSlot& y) {
  for (int64_t i = 0; i < scan_state_floats(geo); ++i) x.s[i] += y.s[i];
}

// Opens one parallel region of `threads` threads, each with its own buffers carved from its
// slice of the workspace, and runs passes(buffers) on every thread: the `omp for` loops inside
// passes share their iterations among those threads.
template <class Passes>
void on_threads_with_buffers(const Geometry& geo, Pass pass, int threads, float* workspace,
                             Passes passes) {
  const int64_t per_thread = per_thread_floats(geo, pass);
#pragma omp parallel num_threads(threads)
  {
    Arena arena(workspace + omp_get_thread_num() * per_thread);
    const Buffers w(arena, geo, pass);
    passes(w);
  }
}

// Runs fn(slice index, buffers) over the B*H slices on as many threads as the workspace
// holds buffers for.
template <class Fn>
void for_each_slice(const char* op, const Geometry& geo, Pass pass, float* workspace,
                    size_t workspace_floats, Fn fn) {
  const int64_t slices = geo.batch * geo.heads;
  if (slices == 0) return;
  const int64_t per_thread = per_thread_floats(geo, pass);
  const int64_t fits = static_cast<int64_t>(workspace_floats) / per_thread;
  TARN_ASSERT(workspace && fits >= 1, op, ": workspace of ", workspace_floats,
              " floats is smaller than one thread's ", per_thread);
  const int threads = static_cast<int>(std::min<int64_t>(planned_threads(geo), fits));
  on_threads_with_buffers(geo, pass, threads, workspace, [&](const Buffers& w) {
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < slices; ++bh) fn(bh, w);
  });
}

// The three passes over a split sequence (see planned_segments), in one parallel region, each
// pass's items shared among the threads:
//   1. segment_sums(bh, k, rows, buffers): what segment k (its rows) of slice bh adds to the
//      state, into its slot;
//   2. prefix(bh): the slots of slice bh summed into the state each segment starts from;
//   3. scan(bh, k, rows, buffers): segment k of slice bh scanned from that state.
template <class SegmentSums, class Prefix, class Scan>
void split_passes(const Geometry& geo, const SplitPlan& plan, Pass pass, float* workspace,
                  SegmentSums segment_sums, Prefix prefix, Scan scan) {
  const int64_t slices = geo.batch * geo.heads, segs = plan.segments;
  on_threads_with_buffers(geo, pass, plan.threads, workspace, [&](const Buffers& w) {
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < slices * segs; ++t)
      segment_sums(t / segs, t % segs, segment_rows(geo, segs, t % segs), w);
#pragma omp for
    for (int64_t bh = 0; bh < slices; ++bh) prefix(bh);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < slices * segs; ++t)
      scan(t / segs, t % segs, segment_rows(geo, segs, t % segs), w);
  });
}

// Forward of a split sequence. Slot j of direction 0 holds, after pass 2, the S' of segments
// 0 .. j: the start of segment j + 1.
template <class SliceOf>
void forward_split(const Geometry& geo, const LinearAttentionConfig& cfg, const SplitPlan& plan,
                   float* workspace, SliceOf slice_of_bh) {
  const int64_t last = plan.segments - 1;
  split_passes(
      geo, plan, Pass::forward, workspace,
      [&](int64_t bh, int64_t k, RowRange rows, const Buffers& w) {
        if (k == last) return;  // no segment starts after the last one
        const StateSlot sum = state_slot(geo, plan, 0, bh, k);
        causal_key_value_sum(geo, cfg, slice_of_bh(bh), w, rows, sum.s, sum.z);
      },
      [&](int64_t bh) {
        for (int64_t j = 1; j < last; ++j)
          add_state(geo, state_slot(geo, plan, 0, bh, j), state_slot(geo, plan, 0, bh, j - 1));
      },
      [&](int64_t bh, int64_t k, RowRange rows, const Buffers& w) {
        const ScanState before = k > 0 ? state_slot(geo, plan, 0, bh, k - 1) : StateSlot{};
        causal_forward_slice(geo, cfg, slice_of_bh(bh), w, rows, before);
      });
}

// Backward of a split sequence: direction 0 as in forward_split for the dA scan; slot j of
// direction 1 holds, after pass 2, the R' of segments j + 1 .. last: the start of segment j
// of the reverse scan.
template <class SliceOf>
void backward_split(const Geometry& geo, const LinearAttentionConfig& cfg, const SplitPlan& plan,
                    float* workspace, SliceOf slice_of_bh) {
  const int64_t segs = plan.segments;
  split_passes(
      geo, plan, Pass::backward, workspace,
      [&](int64_t bh, int64_t k, RowRange rows, const Buffers& w) {
        const Slice slice = slice_of_bh(bh);
        if (slice.da && k < segs - 1) {
          const StateSlot sum = state_slot(geo, plan, 0, bh, k);
          causal_key_value_sum(geo, cfg, slice, w, rows, sum.s, sum.z);
        }
        if ((slice.db || slice.dv) && k > 0) {
          const StateSlot sum = state_slot(geo, plan, 1, bh, k - 1);
          causal_query_grad_sum(geo, cfg, slice, w, rows, sum.s, sum.z);
        }
      },
      [&](int64_t bh) {
        const Slice slice = slice_of_bh(bh);
        for (int64_t j = 1; slice.da && j < segs - 1; ++j)
          add_state(geo, state_slot(geo, plan, 0, bh, j), state_slot(geo, plan, 0, bh, j - 1));
        for (int64_t j = segs - 3; (slice.db || slice.dv) && j >= 0; --j)
          add_state(geo, state_slot(geo, plan, 1, bh, j), state_slot(geo, plan, 1, bh, j + 1));
      },
      [&](int64_t bh, int64_t k, RowRange rows, const Buffers& w) {
        const Slice slice = slice_of_bh(bh);
        const ScanState before = k > 0 ? state_slot(geo, plan, 0, bh, k - 1) : StateSlot{};
        const ScanState after = k < segs - 1 ? state_slot(geo, plan, 1, bh, k) : StateSlot{};
        if (slice.da) causal_backward_da(geo, cfg, slice, w, rows, before);
        if (slice.db || slice.dv) causal_backward_db_dv(geo, cfg, slice, w, rows, after);
      });
}

// One pass over the whole batch: split along the sequence when plan_split says so, otherwise
// one whole slice at a time, whole_slice(slice_of_bh(bh), buffers).
template <class SliceOf, class WholeSlice>
void split_or_whole_slices(const char* op, const Geometry& geo, const LinearAttentionConfig& cfg,
                           Pass pass, float* workspace, size_t workspace_floats,
                           SliceOf slice_of_bh, WholeSlice whole_slice) {
  const SplitPlan plan = plan_split(geo, cfg, pass, workspace, workspace_floats);
  if (plan.segments > 1 && pass == Pass::forward)
    forward_split(geo, cfg, plan, workspace, slice_of_bh);
  else if (plan.segments > 1)
    backward_split(geo, cfg, plan, workspace, slice_of_bh);
  else
    for_each_slice(op, geo, pass, workspace, workspace_floats,
                   [&](int64_t bh, const Buffers& w) { whole_slice(slice_of_bh(bh), w); });
}

}  // namespace

void linear_attention_set_cpu_sequence_split(int segments) {
  TARN_ASSERT(segments >= 0, "linear_attention_set_cpu_sequence_split: segments must be >= 0, got ",
              segments);
  forced_sequence_segments.store(segments, std::memory_order_relaxed);
}

size_t linear_attention_forward_workspace_floats(const LinearAttentionDims& dims,
                                                 const LinearAttentionConfig& cfg) {
  check_args("linear_attention_forward", dims, cfg);
  return needed_workspace_floats(make_geometry(dims, cfg), cfg, Pass::forward);
}

size_t linear_attention_backward_workspace_floats(const LinearAttentionDims& dims,
                                                  const LinearAttentionConfig& cfg) {
  check_args("linear_attention_backward", dims, cfg);
  return needed_workspace_floats(make_geometry(dims, cfg), cfg, Pass::backward);
}

void linear_attention_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                              const float* a, const float* b, const float* v, float* out,
                              float* den, float* workspace, size_t workspace_floats) {
  check_args("linear_attention_forward", dims, cfg);
  const Geometry geo = make_geometry(dims, cfg);
  auto slice_at = [&](int64_t bh) {
    Slice slice = slice_of(geo, cfg, bh, a, b, v);
    slice.out_w = out + bh * geo.n_q * geo.e;
    slice.den_w = den + bh * geo.n_q;
    return slice;
  };
  split_or_whole_slices("linear_attention_forward", geo, cfg, Pass::forward, workspace,
                        workspace_floats, slice_at, [&](const Slice& slice, const Buffers& w) {
                          if (cfg.causal)
                            causal_forward_slice(geo, cfg, slice, w, {0, geo.n_q}, {});
                          else
                            bidirectional_forward_slice(geo, cfg, slice, w);
                        });
}

void linear_attention_backward(const LinearAttentionDims& dims,
                               const LinearAttentionConfig& cfg, const float* a, const float* b,
                               const float* v, const float* out, const float* den,
                               const float* dout, float* da, float* db, float* dv,
                               float* workspace, size_t workspace_floats) {
  check_args("linear_attention_backward", dims, cfg);
  const Geometry geo = make_geometry(dims, cfg);
  if (!da && !db && !dv) return;
  auto slice_at = [&](int64_t bh) {
    Slice slice = slice_of(geo, cfg, bh, a, b, v);
    slice.out = out + bh * geo.n_q * geo.e;
    slice.den = den + bh * geo.n_q;
    slice.dout = dout + bh * geo.n_q * geo.e;
    slice.da = da ? da + bh * geo.n_q * geo.d : nullptr;
    slice.db = db ? db + bh * geo.n_k * geo.d : nullptr;
    slice.dv = dv ? dv + bh * geo.n_k * geo.e : nullptr;
    return slice;
  };
  split_or_whole_slices(
      "linear_attention_backward", geo, cfg, Pass::backward, workspace, workspace_floats, slice_at,
      [&](const Slice& slice, const Buffers& w) {
        if (!cfg.causal) {
          bidirectional_backward_slice(geo, cfg, slice, w);
          return;
        }
        if (slice.da) causal_backward_da(geo, cfg, slice, w, {0, geo.n_q}, {});
        if (slice.db || slice.dv) causal_backward_db_dv(geo, cfg, slice, w, {0, geo.n_q}, {});
      });
}

// ---- FLOP count (see the header) ----

double linear_attention_flops(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                              bool backward) {
  const double d = double(dims.d), ep = double(dims.e + 1), slices = double(dims.batch * dims.heads);
  if (!cfg.causal) {
    const double nq = double(dims.n_q), nk = double(dims.n_k);
    const double f = backward ? 4 * nq * d * ep + 6 * nk * d * ep : 2 * nk * d * ep + 2 * nq * d * ep;
    return slices * f;
  }
  const int64_t n = dims.n_q;
  const int64_t C = std::max<int64_t>(1, std::min<int64_t>(cfg.chunk, n));
  double total = 0.0;
  for (int64_t r0 = 0; r0 < n; r0 += C) {
    const double r = double(std::min(C, n - r0)), t = r * (r + 1) / 2;
    total += backward ? 10 * r * d * ep + 6 * t * (d + ep) : 4 * r * d * ep + 2 * t * (d + ep);
  }
  return slices * total;
}

}  // namespace tarn::kernels::cpu
