// Linear attention on CUDA (DESIGN.md section 2), the entry points of kernels/linear_attention.h
// on device buffers. Inputs are features already (a = phi(q), b = phi(k)): the feature map must
// be identity.
//
// Every pass is one chunked scan (linear_attention_scan_kernel) of the shape
//   O_i = X_i S + sum_{j in the chunk, j <= i (forward) or j >= i (reverse)} (X_i . Y_j) W_j
//   S   = sum over the chunks already scanned of Y_j^T W_j              (p x q, f32, shared)
// or, for bidirectional attention, S = sum over all rows of Y^T W first and then O = X S:
//   forward     X = a,  Y = b,  W = V' = [v | 1], q = e + 1 -> U = [num | den], forward scan
//   dA          X = G,  Y = V', W = b,            q = d                        forward scan
//   dB          X = V', Y = G,  W = a,            q = d                        reverse scan
//   dV          X = b,  Y = a,  W = G,            q = e                        reverse scan
// with G = [dO / (den + eps) | -(dO . out) / (den + eps)]; padded keys are zero rows of b (and
// their dB rows are zeroed). One thread block per (batch*head, tile of kTileQ output columns);
// the state is recomputed as the scan goes: no per-position or per-chunk states are kept, and
// the workspace (U for forward, G for backward) is (B, H, Nq, e + 1) floats, linear in N.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::FeatureMap;
using cpu::LinearAttentionConfig;
using cpu::LinearAttentionDims;

constexpr int kChunk = 32;        // rows per chunk of the scan
// Output columns per thread block: 33, so that the typical e + 1 (33, 65, 129) splits into
// whole tiles instead of leaving the normaliser column a block of its own.
constexpr int kTileQ = 33;
constexpr int kScanThreads = 128;  // threads per scan block
constexpr size_t kDefaultSmem = 48 * 1024;  // dynamic shared memory without opting in

enum ScanMode : int { kForwardScan = 0, kReverseScan = 1, kFull = 2 };

// A (B, H, rows, cols) row-major operand, read as (rows, cols + ones): an optional column of
// ones appended (V' = [V | 1]) and optional zero rows where pad (B, rows) is nonzero.
struct Operand {
  const float* ptr;
  int64_t rows;
  int cols;
  int ones;          // 1: a column of ones at index cols
  const float* pad;  // (batch, rows) key padding flags or null
};

__device__ __forceinline__ float operand_at(const Operand& o, int64_t bh, int64_t heads, int64_t row, int col) {
  if (o.pad && o.pad[(bh / heads) * o.rows + row] != 0.0f) return 0.0f;
  if (col >= o.cols) return 1.0f;  // the ones column (callers never ask past it)
  return o.ptr[(bh * o.rows + row) * o.cols + col];
}

// Loads rows [r0, r0 + r) and columns [c0, c0 + w) of an operand into a (r, ld) tile.
__device__ __forceinline__ void load_tile(const Operand& o, int64_t bh, int64_t heads, int64_t r0, int r, int c0,
                                          int w, float* tile, int ld) {
  for (int idx = threadIdx.x; idx < r * w; idx += blockDim.x) {
    const int i = idx / w, k = idx % w;
    tile[i * ld + k] = operand_at(o, bh, heads, r0 + i, c0 + k);
  }
}

// Rows of the chunk starting at r0 of a rows-long sequence.
__device__ __forceinline__ int rows_in_chunk(int64_t rows, int64_t r0) {
  return rows - r0 < kChunk ? static_cast<int>(rows - r0) : kChunk;
}

struct ScanShape {
  int p;            // width of X and Y (d or e + 1)
  int ldp;          // row stride of the X and Y tiles (p rounded to odd: fewer bank conflicts)
  int q;            // output columns (the first q columns of W)
  int64_t heads;
  int64_t slices;   // batch * heads
  int mode;         // ScanMode
};

// Floats of dynamic shared memory: X, Y tiles (kChunk x ldp), W tile (kChunk x kTileQ), the
// masked chunk product P (kChunk x kChunk) and the state S (p x kTileQ).
inline size_t scan_smem_floats(int p, int ldp) {
  return static_cast<size_t>(2 * kChunk * ldp + kChunk * kTileQ + kChunk * kChunk + p * kTileQ);
}

// x: (B,H,nx,p) y: (B,H,ny,p) w: (B,H,ny,>=q) out: (B,H,nx,q); grid (q tiles, slices).
// Barriers: each phase reads what the previous one wrote, and the loads of the next chunk
// overwrite what the state update reads, so each phase ends with __syncthreads().
__global__ void linear_attention_scan_kernel(Operand x, Operand y, Operand w, ScanShape sh, float* out,
                                             const float* out_pad) {
  TARN_DYNAMIC_SHARED(float, smem);
  const int ldp = sh.ldp, p = sh.p;
  float* xs = smem;                    // kChunk x ldp
  float* ys = xs + kChunk * ldp;       // kChunk x ldp
  float* ws = ys + kChunk * ldp;       // kChunk x kTileQ
  float* pm = ws + kChunk * kTileQ;    // kChunk x kChunk
  float* st = pm + kChunk * kChunk;    // p x kTileQ
  const int c0 = blockIdx.x * kTileQ;
  const int wq = sh.q - c0 < kTileQ ? sh.q - c0 : kTileQ;
  const int tid = threadIdx.x, nt = blockDim.x;

  for (int64_t bh = blockIdx.y; bh < sh.slices; bh += gridDim.y) {
    // Nothing reads the state before the barrier after the first loads, and the previous
    // slice's last phase ended with one: the zeroing needs no barrier of its own.
    for (int idx = tid; idx < p * kTileQ; idx += nt) st[idx] = 0.0f;

    // O rows [r0, r0 + r) = X S (+ the masked intra-chunk part when causal).
    auto emit = [&](int64_t r0, int r, bool intra) {
      for (int idx = tid; idx < r * wq; idx += nt) {
        const int i = idx / wq, m = idx % wq;
        float acc = 0.0f;
        const float* xr = xs + i * ldp;
        for (int k = 0; k < p; ++k) acc += xr[k] * st[k * kTileQ + m];
        if (intra) {
          const float* pr = pm + i * kChunk;
          for (int j = 0; j < r; ++j) acc += pr[j] * ws[j * kTileQ + m];
        }
        const int64_t row = r0 + i;
        if (out_pad && out_pad[(bh / sh.heads) * x.rows + row] != 0.0f) acc = 0.0f;
        out[(bh * x.rows + row) * sh.q + c0 + m] = acc;
      }
    };
    // S += Y^T W over the r rows in the tiles.
    auto update_state = [&](int r) {
      for (int idx = tid; idx < p * wq; idx += nt) {
        const int k = idx / wq, m = idx % wq;
        float acc = 0.0f;
        for (int i = 0; i < r; ++i) acc += ys[i * ldp + k] * ws[i * kTileQ + m];
        st[k * kTileQ + m] += acc;
      }
    };

    if (sh.mode == kFull) {
      for (int64_t r0 = 0; r0 < y.rows; r0 += kChunk) {
        const int r = rows_in_chunk(y.rows, r0);
        load_tile(y, bh, sh.heads, r0, r, 0, p, ys, ldp);
        load_tile(w, bh, sh.heads, r0, r, c0, wq, ws, kTileQ);
        __syncthreads();
        update_state(r);
        __syncthreads();
      }
      for (int64_t r0 = 0; r0 < x.rows; r0 += kChunk) {
        const int r = rows_in_chunk(x.rows, r0);
        load_tile(x, bh, sh.heads, r0, r, 0, p, xs, ldp);
        __syncthreads();
        emit(r0, r, false);
        __syncthreads();
      }
      continue;
    }

    const int64_t chunks = (x.rows + kChunk - 1) / kChunk;
    const bool reverse = sh.mode == kReverseScan;
    for (int64_t step = 0; step < chunks; ++step) {
      const int64_t c = reverse ? chunks - 1 - step : step;
      const int64_t r0 = c * kChunk;
      const int r = rows_in_chunk(x.rows, r0);
      load_tile(x, bh, sh.heads, r0, r, 0, p, xs, ldp);
      load_tile(y, bh, sh.heads, r0, r, 0, p, ys, ldp);
      load_tile(w, bh, sh.heads, r0, r, c0, wq, ws, kTileQ);
      __syncthreads();
      // P = M o (X Y^T): M keeps j <= i (forward) or j >= i (reverse).
      for (int idx = tid; idx < r * r; idx += nt) {
        const int i = idx / r, j = idx % r;
        float acc = 0.0f;
        if (reverse ? j >= i : j <= i) {
          const float* xr = xs + i * ldp;
          const float* yr = ys + j * ldp;
          for (int k = 0; k < p; ++k) acc += xr[k] * yr[k];
        }
        pm[i * kChunk + j] = acc;
      }
      __syncthreads();
      emit(r0, r, true);
      __syncthreads();  // every read of the state before this chunk's update
      update_state(r);
      __syncthreads();  // the update reads ys, ws, which the next chunk's loads overwrite
    }
  }
}

// out = U[:, :e] / (U[:, e] + eps), den = U[:, e]; u: (rows, e + 1), out: (rows, e).
__global__ void linear_attention_normalize_kernel(const float* u, float* out, float* den, int64_t rows, int e,
                                                  float eps) {
  const int64_t total = rows * (e + 1);
  for (int64_t idx = device::global_index(); idx < total; idx += device::global_stride()) {
    const int64_t i = idx / (e + 1);
    const int m = static_cast<int>(idx % (e + 1));
    const float dn = u[i * (e + 1) + e];
    if (m == e)
      den[i] = dn;
    else
      out[i * e + m] = u[idx] / (dn + eps);
  }
}

// g: (rows, e + 1) = [dO / (den + eps) | -(dO . out) / (den + eps)], one warp per row.
__global__ void linear_attention_g_kernel(const float* dout, const float* out, const float* den, float* g,
                                          int64_t rows, int e, float eps) {
  const int lane = threadIdx.x % device::kWarp;
  const int64_t warp = device::global_index() / device::kWarp;
  const int64_t warps = device::global_stride() / device::kWarp;
  for (int64_t i = warp; i < rows; i += warps) {
    const float inv = 1.0f / (den[i] + eps);
    const float* dr = dout + i * e;
    const float* orow = out + i * e;
    float* gr = g + i * (e + 1);
    float dot = 0.0f;
    for (int m = lane; m < e; m += device::kWarp) {
      dot += dr[m] * orow[m];
      gr[m] = dr[m] * inv;
    }
    dot = device::warp_reduce(dot, device::Sum());
    if (lane == 0) gr[e] = -dot * inv;
  }
}

// One recurrent step per (batch, head), one block each: S' += b v'^T (unless padded), then
// out = a^T S' / (a^T z + eps). a, b: (slices, d) v: (slices, e) state: (slices, d, e + 1)
// out: (slices, e); thread m owns column m of the state (blockDim.x >= e + 1).
__global__ void linear_attention_step_kernel(const float* a, const float* b, const float* v, float* state,
                                             float* out, const float* pad, int64_t heads, int d, int e, float eps) {
  __shared__ float den;
  const int m = threadIdx.x;
  const int w = e + 1;
  const int64_t bh = blockIdx.x;
  const bool masked = pad && pad[bh / heads] != 0.0f;
  float acc = 0.0f;
  if (m < w) {
    const float* ar = a + bh * d;
    const float* br = b + bh * d;
    const float vm = m < e ? v[bh * e + m] : 1.0f;
    float* col = state + bh * d * w + m;
    for (int k = 0; k < d; ++k) {
      float s = col[k * w];
      if (!masked) {
        s += br[k] * vm;
        col[k * w] = s;
      }
      acc += ar[k] * s;
    }
    if (m == e) den = acc;
  }
  __syncthreads();
  if (m < e) out[bh * e + m] = acc / (den + eps);
}

void check_args(const char* op, const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  TARN_CHECK(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
             ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q, ", Nk=", dims.n_k, ")");
  TARN_CHECK(dims.d > 0 && dims.e > 0, op, ": feature dim d=", dims.d, " and value dim e=", dims.e,
             " must be positive");
  TARN_CHECK(!cfg.causal || dims.n_q == dims.n_k, op, ": causal attention needs Nq == Nk, got Nq=", dims.n_q,
             " Nk=", dims.n_k);
  TARN_CHECK(cfg.eps > 0.0f, op, ": eps must be positive, got ", cfg.eps);
  TARN_CHECK(cfg.feature_map == FeatureMap::identity, op, ": the CUDA kernels take features (a = phi(q), b = phi(k)); ",
             "apply the ", cpu::feature_map_name(cfg.feature_map), " feature map first and pass identity");
}

// Launches one scan: O (B, H, x.rows, q) from X, Y (width p) and W.
void scan(const Operand& x, const Operand& y, const Operand& w, int p, int q, int64_t heads, int64_t slices,
          ScanMode mode, float* out, const float* out_pad) {
  if (slices == 0 || x.rows == 0) return;
  const int ldp = p | 1;
  const size_t smem = scan_smem_floats(p, ldp) * sizeof(float);
  if (smem > kDefaultSmem)
    TARN_CUDA_CALL(cudaFuncSetAttribute(linear_attention_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  const ScanShape sh{p, ldp, q, heads, slices, mode};
  const dim3 grid(static_cast<unsigned>((q + kTileQ - 1) / kTileQ),
                  static_cast<unsigned>(std::min<int64_t>(slices, device::kMaxGridY)));
  tarn::launch(linear_attention_scan_kernel, grid, kScanThreads, smem, nullptr, x, y, w, sh, out, out_pad);
}

void check_workspace(const char* op, const float* workspace, size_t have, size_t need) {
  TARN_CHECK(need == 0 || (workspace && have >= need), op, ": workspace of ", have, " floats is smaller than the ",
             need, " it needs");
}

}  // namespace

size_t linear_attention_forward_workspace_floats(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  check_args("linear_attention_forward", dims, cfg);
  return static_cast<size_t>(dims.batch * dims.heads * dims.n_q * (dims.e + 1));
}

void linear_attention_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,
                              const float* b, const float* v, float* out, float* den, float* workspace,
                              size_t workspace_floats) {
  const char* op = "linear_attention_forward";
  check_args(op, dims, cfg);
  const size_t need = TARN_CUDA_NS::linear_attention_forward_workspace_floats(dims, cfg);
  check_workspace(op, workspace, workspace_floats, need);
  const int64_t slices = dims.batch * dims.heads, rows = slices * dims.n_q;
  if (rows == 0) return;
  const int d = static_cast<int>(dims.d), e = static_cast<int>(dims.e);
  const Operand xa{a, dims.n_q, d, 0, nullptr};
  const Operand yb{b, dims.n_k, d, 0, cfg.key_padding_mask};
  const Operand wv{v, dims.n_k, e, 1, nullptr};
  scan(xa, yb, wv, d, e + 1, dims.heads, slices, cfg.causal ? kForwardScan : kFull, workspace, nullptr);
  tarn::launch(linear_attention_normalize_kernel, device::grid_for(rows * (e + 1)), device::kBlock, 0, nullptr,
               static_cast<const float*>(workspace), out, den, rows, e, cfg.eps);
}

size_t linear_attention_backward_workspace_floats(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  check_args("linear_attention_backward", dims, cfg);
  return static_cast<size_t>(dims.batch * dims.heads * dims.n_q * (dims.e + 1));
}

void linear_attention_backward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,
                               const float* b, const float* v, const float* out, const float* den,
                               const float* dout, float* da, float* db, float* dv, float* workspace,
                               size_t workspace_floats) {
  const char* op = "linear_attention_backward";
  check_args(op, dims, cfg);
  if (!da && !db && !dv) return;
  const size_t need = TARN_CUDA_NS::linear_attention_backward_workspace_floats(dims, cfg);
  check_workspace(op, workspace, workspace_floats, need);
  const int64_t slices = dims.batch * dims.heads;
  const int d = static_cast<int>(dims.d), e = static_cast<int>(dims.e);
  const int64_t q_rows = slices * dims.n_q;
  if (q_rows > 0)
    tarn::launch(linear_attention_g_kernel, device::grid_for(q_rows * device::kWarp), device::kBlock, 0, nullptr,
                 dout, out, den, workspace, q_rows, e, cfg.eps);
  const float* pad = cfg.key_padding_mask;
  const Operand a_op{a, dims.n_q, d, 0, nullptr};
  const Operand b_op{b, dims.n_k, d, 0, pad};
  const Operand v_op{v, dims.n_k, e, 1, nullptr};
  const Operand g_op{workspace, dims.n_q, e + 1, 0, nullptr};
  const ScanMode fwd = cfg.causal ? kForwardScan : kFull, rev = cfg.causal ? kReverseScan : kFull;
  if (da) scan(g_op, v_op, b_op, e + 1, d, dims.heads, slices, fwd, da, nullptr);
  if (db) scan(v_op, g_op, a_op, e + 1, d, dims.heads, slices, rev, db, pad);
  if (dv) scan(b_op, a_op, g_op, d, e, dims.heads, slices, rev, dv, nullptr);
}

void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,
                           const float* b, const float* v, float* state, float* out) {
  TARN_CHECK(dims.d > 0 && dims.e > 0 && dims.batch >= 0 && dims.heads >= 0, "linear_attention_step: bad dims d=",
             dims.d, " e=", dims.e);
  TARN_CHECK(cfg.eps > 0.0f, "linear_attention_step: eps must be positive, got ", cfg.eps);
  TARN_CHECK(cfg.feature_map == FeatureMap::identity, "linear_attention_step: the CUDA kernel takes features; apply the ",
             cpu::feature_map_name(cfg.feature_map), " feature map first and pass identity");
  const int64_t slices = dims.batch * dims.heads;
  if (slices == 0) return;
  const int64_t threads = (dims.e + 1 + device::kWarp - 1) / device::kWarp * device::kWarp;
  TARN_CHECK(threads <= 1024, "linear_attention_step: value dim e=", dims.e, " is above the 1023 one block holds");
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;  // hardware limit of gridDim.x
  TARN_CHECK(slices <= kMaxGridX, "linear_attention_step: ", slices, " (batch, head) pairs exceed one grid");
  tarn::launch(linear_attention_step_kernel, static_cast<unsigned>(slices), static_cast<unsigned>(threads), 0, nullptr,
               a, b, v, state, out, cfg.key_padding_mask, dims.heads, static_cast<int>(dims.d),
               static_cast<int>(dims.e), cfg.eps);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
