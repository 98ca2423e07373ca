// Linear attention on CUDA (docs/design.md section 2), the entry points of kernels/linear_attention.h
// on device buffers, with the row-local feature maps (elu1, relu, exp, identity) fused into the
// loads: a and b are the raw q and k, phi(q) and phi(k) are never written, and backward returns
// dq and dk (favor is applied before, by favor_forward in linear_attention_favor.cu; the
// recurrent step is linear_attention_step.cu).
//
// Every pass is one chunked scan (linear_attention_scan_kernel) of the shape
//   O_i = X_i S + sum_{j in the chunk, j <= i (forward) or j >= i (reverse)} (X_i . Y_j) W_j
//   S   = sum over the chunks already scanned of Y_j^T W_j              (p x q, f32, shared)
// or, for bidirectional attention, S = sum over all rows of Y^T W first and then O = X S:
//   forward     X = phi(a), Y = phi(b), W = V' = [v | 1], q = e + 1 -> U = [num | den], forward
//   dA          X = G,      Y = V',     W = phi(b),       q = d       -> dphi(a), forward scan
//   dB          X = V',     Y = G,      W = phi(a),       q = d       -> dphi(b), reverse scan
//   dV          X = phi(b), Y = phi(a), W = G,            q = e                   reverse scan
// with G = [dO / (den + eps) | -(dO . out) / (den + eps)]; padded keys are zero rows of phi(b)
// (and their dB rows are zeroed). dA and dB are chained through phi' as they are written for
// the elementwise maps; for exp (whose Jacobian couples a row) a row-wise pass follows the scan.
//
// Work split: one thread block per (batch*head, tile of kTileQ output columns, sequence
// segment). With one segment the block scans the whole sequence, recomputing the state as it
// goes. When that gives fewer blocks than the GPU has SMs (small B*H), the sequence is split
// into segments (or a test forces it, linear_attention_set_sequence_split): pass 1 computes each
// segment's state sum Y_seg^T W_seg, pass 2 turns them into exclusive prefix sums (suffix sums
// for the reverse scan, the total for bidirectional attention), pass 3 scans every segment from
// its starting state. No per-position or per-chunk states are kept: the workspace is U (forward)
// or G (backward), (B, H, Nq, e + 1) floats, plus segments * d * (e + 1) floats per (batch, head)
// when split: linear in N.
//
// For the hardware: loads are coalesced (consecutive threads read consecutive columns of a
// row), the state lives in shared memory for the whole scan, the three products of a chunk
// run on register micro-tiles (a lane per chunk row, kColsPerWarp columns per thread) and the
// output tile is staged in shared memory so that its stores are coalesced too; f32 throughout.
#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/feature_maps.cuh"
#include "kernels/cuda/linear_attention_shared.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::FeatureMap;
using cpu::LinearAttentionConfig;
using cpu::LinearAttentionDims;

constexpr int kChunk = kCudaLinearAttentionChunk;  // rows per chunk of the scan (kernels/cuda_kernels.h)
// Output columns per thread block: 33, so that the typical e + 1 (33, 65, 129) splits into
// whole tiles instead of leaving the normaliser column a block of its own.
constexpr int kTileQ = 33;
constexpr int kScanThreads = 128;  // threads per scan block
// Blocks a multiprocessor should hold at once: ptxas then gives the scan 80 registers with no
// spills on sm_80 and sm_90 (unbounded it took 96 / 72; bounded by threads alone, 64 on sm_90
// with spills; with 1 block, 144).
constexpr int kScanMinBlocksPerSm = 6;
constexpr int kScanWarps = kScanThreads / device::kWarp;
constexpr size_t kDefaultSmem = 48 * 1024;  // dynamic shared memory without opting in
// Automatic splitting (linear_attention_shared.cuh): every segment at least this many chunks.
constexpr int64_t kMinChunksPerSegment = 4;

// The forced segment count of linear_attention_set_sequence_split (0: automatic).
std::atomic<int> g_forced_segments{0};

// A (B, H, rows, cols) row-major operand, read as (rows, cols + ones): phi applied to each
// element (identity for values and G), an optional column of ones appended (V' = [V | 1]) and
// optional zero rows where pad (B, rows) is nonzero.
struct Operand {
  const float* ptr;
  int64_t rows;
  int cols;
  int ones;          // 1: a column of ones at index cols
  const float* pad;  // (batch, rows) key padding flags or null
  FeatureMap map;    // applied on load
};

// Where a scan writes O (B, H, rows, q): rows with pad != 0 are zeroed, and when raw is set
// each value is chained through phi'(raw) of the elementwise maps (raw: (B, H, rows, q)).
struct Output {
  float* ptr;
  const float* pad;
  const float* raw;
  FeatureMap map;
};

// Rows of the chunk starting at r0 of a rows-long sequence.
__device__ __forceinline__ int rows_in_chunk(int64_t rows, int64_t r0) {
  return rows - r0 < kChunk ? static_cast<int>(rows - r0) : kChunk;
}

// Loads rows [r0, r0 + r) and columns [c0, c0 + w) of an operand into a (r, ld) tile through
// its feature map. For exp, the warps first find each row's max over all cols (not just the
// tile's) into row_max (kChunk floats of shared memory): a barrier separates that from its use.
// The operand's fields are the same in every thread, so the barrier is reached by all or none.
__device__ __forceinline__ void load_tile(const Operand& o, int64_t bh, int64_t heads, int64_t r0, int r, int c0,
                                          int w, float* tile, int ld, float* row_max) {
  const float* base = o.ptr + (bh * o.rows + r0) * o.cols;
  if (o.map == FeatureMap::exp) {
    const int warp = threadIdx.x / device::kWarp, lane = threadIdx.x % device::kWarp;
    for (int i = warp; i < r; i += kScanWarps) {
      const fmap::ArgMax top = fmap::warp_argmax(base + static_cast<int64_t>(i) * o.cols, o.cols);
      if (lane == 0) row_max[i] = top.value;
    }
    __syncthreads();
  }
  const float* pad = o.pad ? o.pad + (bh / heads) * o.rows + r0 : nullptr;
  for (int idx = threadIdx.x; idx < r * w; idx += blockDim.x) {
    const int i = idx / w, k = c0 + idx % w;
    float x;
    if (pad && pad[i] != 0.0f)
      x = 0.0f;
    else if (k >= o.cols)
      x = 1.0f;  // the ones column (callers never ask past it)
    else if (o.map == FeatureMap::exp)
      x = fmap::phi_exp(base[static_cast<int64_t>(i) * o.cols + k], row_max[i]);
    else
      x = fmap::phi_elementwise(o.map, base[static_cast<int64_t>(i) * o.cols + k]);
    tile[i * ld + (idx % w)] = x;
  }
}

struct ScanShape {
  int p;            // width of X and Y (d or e + 1)
  int ldp;          // row stride of the X and Y tiles (p rounded to odd: fewer bank conflicts)
  int q;            // output columns (the first q columns of W)
  int64_t heads;
  int64_t slices;   // batch * heads
  ScanMode mode;
  ScanPhase phase;
};

// Register micro-tiles: lane i of every warp owns row i of a chunk (kChunk == warp size), and
// warp w owns the output columns w, w + kScanWarps, ... (kColsPerWarp of them, interleaved so
// that a narrow last tile still spreads over the warps). Per step of a contraction a thread
// reads one value of its row (a conflict-free stride, ldp odd) and kColsPerWarp values every
// lane of the warp reads alike (broadcasts), and does kColsPerWarp multiply-adds from registers.
constexpr int kColsPerWarp = (kTileQ + kScanWarps - 1) / kScanWarps;  // 9
constexpr int kLdq = kColsPerWarp * kScanWarps;                        // 36: row stride of W, S, O tiles
constexpr int kPColsPerWarp = kChunk / kScanWarps;                     // 8 columns of P per warp
constexpr int kLdc = kChunk + 1;  // row stride of P: lane i reads row i without bank conflicts
static_assert(kChunk == device::kWarp, "a lane per chunk row");
static_assert(kChunk % kScanWarps == 0, "P's columns split evenly over the warps");

#if defined(__CUDACC__)
#define TARN_LA_UNROLL _Pragma("unroll")
#else
#define TARN_LA_UNROLL
#endif

// Floats of dynamic shared memory: X, Y tiles (kChunk x ldp), W tile (kChunk x kLdq), the
// masked chunk product P (kChunk x kLdc), the state S (p x kLdq), the output tile O (kChunk x
// kLdq, staged so that global stores are coalesced) and three row-max vectors (kChunk each) for
// the exp map.
inline size_t scan_smem_floats(int p, int ldp) {
  return static_cast<size_t>(2 * kChunk * ldp + kChunk * kLdq + kChunk * kLdc + p * kLdq + kChunk * kLdq +
                             3 * kChunk);
}

// One block's share of a scan: its shared-memory tiles, its output columns [c0, c0 + wq), the
// slice bh it is on, and the steps the kernel composes. Each step is a block-wide operation;
// the kernel places the barriers between them.
struct ScanBlock {
  const ScanShape& sh;
  const Output& out;
  int64_t x_rows;
  int64_t bh = 0;      // the (batch, head) slice
  float* xs;           // X chunk, kChunk x ldp
  float* ys;           // Y chunk, kChunk x ldp
  float* ws;           // W chunk tile, kChunk x kLdq
  float* pm;           // masked chunk product P, kChunk x kLdc
  float* st;           // state S, p x kLdq
  float* ot;           // output tile O, kChunk x kLdq
  float* row_max;      // 3 x kChunk row maxima (X, Y, W) for the exp map
  int c0, wq;          // first output column of the block, and how many are real
  int tid, threads, lane, warp;

  __device__ ScanBlock(const ScanShape& shape, const Output& o, int64_t rows, float* smem)
      : sh(shape), out(o), x_rows(rows) {
    xs = smem;
    ys = xs + kChunk * sh.ldp;
    ws = ys + kChunk * sh.ldp;
    pm = ws + kChunk * kLdq;
    st = pm + kChunk * kLdc;
    ot = st + sh.p * kLdq;
    row_max = ot + kChunk * kLdq;
    c0 = blockIdx.x * kTileQ;
    wq = sh.q - c0 < kTileQ ? sh.q - c0 : kTileQ;
    tid = threadIdx.x;
    threads = blockDim.x;
    lane = tid % device::kWarp;
    warp = tid / device::kWarp;
  }

  // S = 0, or the segment's prefix state from pass 2 (the scan phase of a split scan).
  __device__ __forceinline__ void start_state(const float* segment_state) const {
    for (int idx = tid; idx < sh.p * kLdq; idx += threads) {
      const int k = idx / kLdq, m = idx % kLdq;
      st[idx] = sh.phase == ScanPhase::scan && segment_state && m < wq ? segment_state[k * sh.q + m] : 0.0f;
    }
  }

  // Rows [r0, r0 + r) of an operand into a tile (row_max slot: 0 for X, 1 for Y, 2 for W).
  __device__ __forceinline__ void load(const Operand& o, int64_t r0, int r, int first_col, int cols, float* tile,
                                       int ld, int slot) const {
    load_tile(o, bh, sh.heads, r0, r, first_col, cols, tile, ld, row_max + slot * kChunk);
  }

  // O rows [0, r) of the chunk = X S (+ the masked intra-chunk part P W when causal) into ot.
  __device__ __forceinline__ void emit(int r, bool intra) const {
    if (lane >= r) return;
    float acc[kColsPerWarp];
    TARN_LA_UNROLL
    for (int c = 0; c < kColsPerWarp; ++c) acc[c] = 0.0f;
    const float* xr = xs + lane * sh.ldp;
    for (int k = 0; k < sh.p; ++k) {
      const float xv = xr[k];
      const float* sr = st + k * kLdq + warp;
      TARN_LA_UNROLL
      for (int c = 0; c < kColsPerWarp; ++c) acc[c] += xv * sr[c * kScanWarps];
    }
    if (intra) {
      const float* pr = pm + lane * kLdc;
      for (int j = 0; j < r; ++j) {
        const float pv = pr[j];
        const float* wr = ws + j * kLdq + warp;
        TARN_LA_UNROLL
        for (int c = 0; c < kColsPerWarp; ++c) acc[c] += pv * wr[c * kScanWarps];
      }
    }
    float* orow = ot + lane * kLdq + warp;
    TARN_LA_UNROLL
    for (int c = 0; c < kColsPerWarp; ++c) orow[c * kScanWarps] = acc[c];
  }

  // ot rows [0, r) to the output rows [r0, r0 + r), coalesced, with padding and phi'.
  __device__ __forceinline__ void store(int64_t r0, int r) const {
    for (int idx = tid; idx < r * wq; idx += threads) {
      const int i = idx / wq, m = idx % wq;
      float v = ot[i * kLdq + m];
      const int64_t row = r0 + i;
      const int64_t at = (bh * x_rows + row) * sh.q + c0 + m;
      if (out.pad && out.pad[(bh / sh.heads) * x_rows + row] != 0.0f) v = 0.0f;
      if (out.raw) v = fmap::chain_elementwise(out.map, out.raw[at], v);
      out.ptr[at] = v;
    }
  }

  // S += Y^T W over the r rows in the tiles: lane k of a 32-row block of S, the warp's columns.
  __device__ __forceinline__ void update_state(int r) const {
    for (int kb = 0; kb < sh.p; kb += device::kWarp) {
      const int k = kb + lane;
      if (k >= sh.p) break;
      float acc[kColsPerWarp];
      TARN_LA_UNROLL
      for (int c = 0; c < kColsPerWarp; ++c) acc[c] = 0.0f;
      for (int i = 0; i < r; ++i) {
        const float yv = ys[i * sh.ldp + k];
        const float* wr = ws + i * kLdq + warp;
        TARN_LA_UNROLL
        for (int c = 0; c < kColsPerWarp; ++c) acc[c] += yv * wr[c * kScanWarps];
      }
      float* sr = st + k * kLdq + warp;
      TARN_LA_UNROLL
      for (int c = 0; c < kColsPerWarp; ++c)
        if (warp + c * kScanWarps < wq) sr[c * kScanWarps] += acc[c];  // padding columns stay 0
    }
  }

  // P = M o (X Y^T) into pm rows [0, r): M keeps j <= i (forward) or j >= i (reverse). Lane i,
  // columns j0 .. j0 + kPColsPerWarp of the warp.
  __device__ __forceinline__ void chunk_product(int r, bool reverse) const {
    const int i = lane, j0 = warp * kPColsPerWarp;
    if (i >= r || j0 >= r) return;
    float* prow = pm + i * kLdc;
    const bool all_masked = reverse ? j0 + kPColsPerWarp - 1 < i : j0 > i;
    float acc[kPColsPerWarp];
    TARN_LA_UNROLL
    for (int c = 0; c < kPColsPerWarp; ++c) acc[c] = 0.0f;
    if (!all_masked) {
      const float* xr = xs + i * sh.ldp;
      const float* yr = ys + j0 * sh.ldp;
      for (int k = 0; k < sh.p; ++k) {
        const float xv = xr[k];
        TARN_LA_UNROLL
        for (int c = 0; c < kPColsPerWarp; ++c) acc[c] += xv * yr[c * sh.ldp + k];
      }
    }
    TARN_LA_UNROLL
    for (int c = 0; c < kPColsPerWarp; ++c) {
      const int j = j0 + c;
      if (j < r) prow[j] = (reverse ? j >= i : j <= i) ? acc[c] : 0.0f;
    }
  }

  // S += Y^T W over the chunks [first, last) of Y and W.
  __device__ __forceinline__ void accumulate(const Operand& y, const Operand& w, int64_t first, int64_t last) const {
    for (int64_t c = first; c < last; ++c) {
      const int64_t r0 = c * kChunk;
      const int r = rows_in_chunk(y.rows, r0);
      load(y, r0, r, 0, sh.p, ys, sh.ldp, 1);
      load(w, r0, r, c0, wq, ws, kLdq, 2);
      __syncthreads();
      update_state(r);
      __syncthreads();
    }
  }

  // The state as this segment's sum (pass 1 of a split scan).
  __device__ __forceinline__ void save_state(float* segment_state) const {
    for (int idx = tid; idx < sh.p * wq; idx += threads) {
      const int k = idx / wq, m = idx % wq;
      segment_state[k * sh.q + m] = st[k * kLdq + m];
    }
  }
};

// x: (B,H,nx,p) y: (B,H,ny,p) w: (B,H,ny,>=q) out: (B,H,nx,q); grid (q tiles, slices,
// segments), kScanThreads threads. states: (slices, segments, p, q) segment states, null when
// not split. Barriers: each step of ScanBlock reads what the previous one wrote, and the loads
// of the next chunk overwrite what the state update and the stores read, so each ends with
// __syncthreads().
__global__ void __launch_bounds__(kScanThreads, kScanMinBlocksPerSm)
    linear_attention_scan_kernel(Operand x, Operand y, Operand w, ScanShape sh, Output out, float* states) {
  TARN_DYNAMIC_SHARED(float, smem);
  ScanBlock b(sh, out, x.rows, smem);
  const int z = blockIdx.z, segments = gridDim.z;

  for (int64_t bh = blockIdx.y; bh < sh.slices; bh += gridDim.y) {
    b.bh = bh;
    float* segment_state = states ? states + ((bh * segments + z) * sh.p) * sh.q + b.c0 : nullptr;
    // Nothing reads the state before the barrier after the first loads, and the previous
    // slice's last step ended with one: this needs no barrier of its own.
    b.start_state(segment_state);

    if (sh.phase == ScanPhase::segment_state) {  // pass 1: this segment's sum, unscanned
      int64_t first, last;
      segment_chunks(y.rows, kChunk, z, segments, first, last);
      b.accumulate(y, w, first, last);
      __syncthreads();  // an empty segment has no barrier between the zeroing and this read
      b.save_state(segment_state);
      __syncthreads();  // the next slice's zeroing overwrites the state this copy reads
      continue;
    }

    int64_t first, last;
    segment_chunks(x.rows, kChunk, z, segments, first, last);
    if (sh.mode == ScanMode::full) {
      // Bidirectional: the whole S' (from pass 2's total when split), then this segment's rows.
      if (!states) b.accumulate(y, w, 0, (y.rows + kChunk - 1) / kChunk);
      for (int64_t c = first; c < last; ++c) {
        const int64_t r0 = c * kChunk;
        const int r = rows_in_chunk(x.rows, r0);
        b.load(x, r0, r, 0, sh.p, b.xs, sh.ldp, 0);
        __syncthreads();
        b.emit(r, false);
        __syncthreads();  // ot complete; the next chunk's emit comes after its load barrier
        b.store(r0, r);
      }
      continue;  // the next slice's first barrier orders these stores before ot is rewritten
    }

    const bool reverse = sh.mode == ScanMode::reverse;
    for (int64_t step = first; step < last; ++step) {
      const int64_t c = reverse ? last - 1 - (step - first) : step;
      const int64_t r0 = c * kChunk;
      const int r = rows_in_chunk(x.rows, r0);
      b.load(x, r0, r, 0, sh.p, b.xs, sh.ldp, 0);
      b.load(y, r0, r, 0, sh.p, b.ys, sh.ldp, 1);
      b.load(w, r0, r, b.c0, b.wq, b.ws, kLdq, 2);
      __syncthreads();
      b.chunk_product(r, reverse);
      __syncthreads();
      b.emit(r, true);
      __syncthreads();  // every read of the state before this chunk's update; ot complete
      b.store(r0, r);
      b.update_state(r);
      __syncthreads();  // the update reads ys, ws, which the next chunk's loads overwrite
    }
  }
}

// The exp map's backward on rows of a gradient the scan wrote as dL/dphi: in place to dL/dx,
// recomputing phi from the raw rows x (rows, d). One warp per row.
__global__ void linear_attention_exp_backward_kernel(const float* x, float* g, int64_t rows, int d) {
  const int64_t warp = device::global_index() / device::kWarp;
  const int64_t warps = device::global_stride() / device::kWarp;
  for (int64_t i = warp; i < rows; i += warps) {
    const float* xr = x + i * d;
    float* gr = g + i * d;
    fmap::exp_row_backward([xr](int k) { return xr[k]; }, [gr](int k) { return gr[k]; },
                           [gr](int k, float v) { gr[k] = v; }, d);
  }
}

int64_t column_tiles(int64_t q) { return (q + kTileQ - 1) / kTileQ; }

// The segments every scan of one call uses (the widest output has the fewest tiles to spread):
// one plan for the call, so that the workspace query and the call agree.
int64_t call_segments(const LinearAttentionDims& dims) {
  const int64_t slices = dims.batch * dims.heads;
  const int64_t tiles = std::min(column_tiles(dims.e), column_tiles(dims.d));
  const int64_t chunks = (std::max(dims.n_q, dims.n_k) + kChunk - 1) / kChunk;
  return plan_segments(chunks, kMinChunksPerSegment, slices * tiles);
}

// Floats of segment states: (slices, segments, p, q) with p * q <= d * (e + 1) for every scan.
size_t segment_state_floats(const LinearAttentionDims& dims) {
  const int64_t segments = call_segments(dims);
  if (segments <= 1) return 0;
  return static_cast<size_t>(dims.batch * dims.heads * segments * dims.d * (dims.e + 1));
}

// Launches one scan: O (B, H, x.rows, q) from X, Y (width p) and W, split into `segments`
// (states: their workspace, needed when segments > 1).
void scan(const Operand& x, const Operand& y, const Operand& w, int p, int q, int64_t heads, int64_t slices,
          ScanMode mode, const Output& out, int64_t segments, float* states) {
  if (slices == 0 || x.rows == 0) return;
  const int ldp = p | 1;
  const size_t smem = scan_smem_floats(p, ldp) * sizeof(float);
  if (smem > kDefaultSmem)
    TARN_CUDA_CALL(cudaFuncSetAttribute(linear_attention_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  const bool split = segments > 1;
  const dim3 grid(static_cast<unsigned>(column_tiles(q)), static_cast<unsigned>(std::min<int64_t>(slices, device::kMaxGridY)),
                  static_cast<unsigned>(split ? segments : 1));
  if (split) {
    const ScanShape pass1{p, ldp, q, heads, slices, mode, ScanPhase::segment_state};
    tarn::launch(linear_attention_scan_kernel, grid, kScanThreads, smem, nullptr, x, y, w, pass1, out, states);
    segment_prefix(states, slices, segments, static_cast<int64_t>(p) * q, mode);
  }
  const ScanShape pass3{p, ldp, q, heads, slices, mode, ScanPhase::scan};
  tarn::launch(linear_attention_scan_kernel, grid, kScanThreads, smem, nullptr, x, y, w, pass3, out,
               split ? states : nullptr);
}

// The exp map's row-wise backward after a scan wrote dL/dphi into g (rows, d).
void exp_backward_rows(const float* x, float* g, int64_t rows, int d) {
  if (rows == 0) return;
  tarn::launch(linear_attention_exp_backward_kernel, device::grid_for(rows * device::kWarp), device::kBlock, 0,
               nullptr, x, g, rows, d);
}

// The output of a gradient scan w.r.t. the raw rows `raw` through the feature map: the
// elementwise maps are chained as the scan writes, exp is left to exp_backward_rows.
Output gradient_output(float* ptr, const float* pad, const float* raw, FeatureMap map) {
  const bool chain = fmap::is_elementwise(map) && map != FeatureMap::identity;
  return Output{ptr, pad, chain ? raw : nullptr, map};
}

}  // namespace

int linear_attention_forced_segments() { return g_forced_segments.load(); }

void linear_attention_set_sequence_split(int segments) {
  TARN_ASSERT(segments >= 0, "linear_attention_set_sequence_split: segments must be >= 0, got ", segments);
  g_forced_segments.store(segments);
}

size_t linear_attention_forward_workspace_floats(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  check_linear_attention_args("linear_attention_forward", dims, cfg);
  return static_cast<size_t>(dims.batch * dims.heads * dims.n_q * (dims.e + 1)) + segment_state_floats(dims);
}

void linear_attention_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,
                              const float* b, const float* v, float* out, float* den, float* workspace,
                              size_t workspace_floats) {
  const char* op = "linear_attention_forward";
  check_linear_attention_args(op, dims, cfg);
  const size_t need = TARN_CUDA_NS::linear_attention_forward_workspace_floats(dims, cfg);
  check_workspace(op, workspace, workspace_floats, need);
  const int64_t slices = dims.batch * dims.heads, rows = slices * dims.n_q;
  if (rows == 0) return;
  const int d = static_cast<int>(dims.d), e = static_cast<int>(dims.e);
  float* u = workspace;
  float* states = workspace + rows * (e + 1);
  const Operand xa{a, dims.n_q, d, 0, nullptr, cfg.feature_map};
  const Operand yb{b, dims.n_k, d, 0, cfg.key_padding_mask, cfg.feature_map};
  const Operand wv{v, dims.n_k, e, 1, nullptr, FeatureMap::identity};
  scan(xa, yb, wv, d, e + 1, dims.heads, slices, cfg.causal ? ScanMode::forward : ScanMode::full,
       Output{u, nullptr, nullptr, FeatureMap::identity}, call_segments(dims), states);
  normalize_rows(static_cast<const float*>(u), out, den, rows, e, cfg.eps);
}

size_t linear_attention_backward_workspace_floats(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  check_linear_attention_args("linear_attention_backward", dims, cfg);
  return static_cast<size_t>(dims.batch * dims.heads * dims.n_q * (dims.e + 1)) + segment_state_floats(dims);
}

void linear_attention_backward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,
                               const float* b, const float* v, const float* out, const float* den,
                               const float* dout, float* da, float* db, float* dv, float* workspace,
                               size_t workspace_floats) {
  const char* op = "linear_attention_backward";
  check_linear_attention_args(op, dims, cfg);
  if (!da && !db && !dv) return;
  const size_t need = TARN_CUDA_NS::linear_attention_backward_workspace_floats(dims, cfg);
  check_workspace(op, workspace, workspace_floats, need);
  const int64_t slices = dims.batch * dims.heads;
  const int d = static_cast<int>(dims.d), e = static_cast<int>(dims.e);
  const int64_t q_rows = slices * dims.n_q;
  float* g = workspace;
  float* states = workspace + q_rows * (e + 1);
  compute_g(dout, out, den, g, q_rows, e, cfg.eps);
  const float* pad = cfg.key_padding_mask;
  const FeatureMap map = cfg.feature_map;
  const Operand a_op{a, dims.n_q, d, 0, nullptr, map};
  const Operand b_op{b, dims.n_k, d, 0, pad, map};
  const Operand v_op{v, dims.n_k, e, 1, nullptr, FeatureMap::identity};
  const Operand g_op{g, dims.n_q, e + 1, 0, nullptr, FeatureMap::identity};
  const ScanMode fwd = cfg.causal ? ScanMode::forward : ScanMode::full;
  const ScanMode rev = cfg.causal ? ScanMode::reverse : ScanMode::full;
  const int64_t segments = call_segments(dims);
  if (da) {
    scan(g_op, v_op, b_op, e + 1, d, dims.heads, slices, fwd, gradient_output(da, nullptr, a, map), segments, states);
    if (map == FeatureMap::exp) exp_backward_rows(a, da, q_rows, d);
  }
  if (db) {
    scan(v_op, g_op, a_op, e + 1, d, dims.heads, slices, rev, gradient_output(db, pad, b, map), segments, states);
    if (map == FeatureMap::exp) exp_backward_rows(b, db, slices * dims.n_k, d);
  }
  if (dv)
    scan(b_op, a_op, g_op, d, e, dims.heads, slices, rev, Output{dv, nullptr, nullptr, FeatureMap::identity},
         segments, states);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
