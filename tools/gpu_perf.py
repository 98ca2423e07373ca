#!/usr/bin/env python3
"""tarn's attention kernels beside PyTorch's and FLA's on one GPU, in one run (issue 50, item 6).

tools/gpu_check.sh perf drives this script on the GPU machine; docs/experiment/gpu_perf.md
describes the method. Subcommands:

  measure --out FILE [--deadline EPOCH_S] [--repeats R] [--warmup W] [--quick]
      On the GPU: the two ceilings of the roofline, measured in this run (a device-to-device
      copy, counting the bytes read and written; an 8192^3 matrix product on random data, bf16,
      and f32 with TF32 off for tarn's f32 kernels), then PyTorch's scaled_dot_product_attention
      on its flash backend, FLA's chunk_linear_attn (normalised, elu+1 feature map) and FLA's
      chunk_gated_delta_rule on the perf shapes. FILE is rewritten after every row. Without FLA
      (or without torch) it still writes FILE, with "fla": "unavailable (why)".
  prewarm --op linear|delta --d D --bh LIST
      Internal (measure starts it): runs FLA's op once per shape so that Triton compiles every
      autotuning config into its on-disk cache, each config launched once and not timed; run in
      parallel processes, one per op and head size, so that the CPU-bound compilation uses
      several cores. The timing process then autotunes from compiled kernels.
  report --torch FILE --tarn FILE [--tarn FILE ...] --out-dir DIR [--commit SHA] ...
      Merges tarn's bench rows (cuda_attention_bench --json) with measure's, computes each
      kernel's bytes, FLOPs, fractions of the two ceilings and its ratio to the reference
      (FLA for linear attention and the delta rule, SDPA for softmax), writes
      DIR/perf-<date>-<commit>.json and DIR/perf_table.md and prints the table. Standard
      library only: it runs without torch.
  selftest
      The pure parts (formulas, merge, table) on fake rows; no torch, no GPU.

Every timing: CUDA events around each call, a median of R >= 10 calls after W untimed ones,
the calls going round several copies of the inputs (3x the L2 in all, at most 32 copies) so
that no call finds its inputs in L2, random normal data (bf16).
"""

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

# The perf shapes: B*H in {8, 128}, N in {1,024, 4,096, 16,384}, d = 64 for every kernel and d = 128
# for the delta rule as well. FLA and SDPA take B = B*H / 8 batches of H = 8 heads (FLA's
# autotuning keys hold H but not the batch or the length, so each op tunes once per head size).
BHS = (8, 128)
NS = (1024, 4096, 16384)
HEADS = 8
QUICK_NS = (1024, 4096)
KERNELS = ("linear_causal", "delta_causal", "softmax_causal")
REFERENCE = {"linear_causal": "fla", "delta_causal": "fla", "softmax_causal": "sdpa"}
LINEAR_CHUNK = 64  # C of the linear attention FLOP count (tarn's bench and FLA both use 64)


def shapes(kernel, quick=False):
    """(bh, n, d) of one kernel, in the order they are timed."""
    ds = (64, 128) if kernel == "delta_causal" else (64,)
    ns = QUICK_NS if quick else NS
    return [(bh, n, d) for d in ds for bh in BHS for n in ns]


# ---------------------------------------------------------------------------------------------
# The two numbers of the roofline

def bytes_moved(kernel, bh, n, d, e, elem, backward):
    """Bytes a pass must move through device memory: each input read once, each output written
    once, tensors at `elem` bytes an element (2 for bf16, 4 for f32), the delta rule's gates at 4.

    forward:  q, k (bh n d each) and v (bh n e) read, out (bh n e) written
              = elem * bh * n * (2 d + 2 e);  the delta rule also reads beta and alpha (log decay
              for FLA): + 8 bh n.
    backward: q, k, v and d_out read, dq, dk, dv written
              = elem * bh * n * (4 d + 3 e);  the delta rule also reads beta, alpha and writes
              their gradients: + 16 bh n.
    Intermediates (softmax's log-sum-exp, linear attention's denominator, checkpoints, FLA's
    chunk states) are not counted: a kernel may recompute them. forward+backward is the sum.
    """
    rows = float(bh) * n
    if not backward:
        total = elem * rows * (2 * d + 2 * e)
        gates = 8.0 * rows
    else:
        total = elem * rows * (4 * d + 3 * e)
        gates = 16.0 * rows
    return total + (gates if kernel == "delta_causal" else 0.0)


def linear_chunked_flops(bh, n, d, e, backward, chunk=LINEAR_CHUNK):
    """kernels/cpu/linear_attention.cpp's linear_attention_flops for the causal chunked algorithm:
    per chunk of r rows (t = r (r + 1) / 2 pairs inside it)
      forward  4 r d (e + 1) + 2 t (d + e + 1)
      backward 10 r d (e + 1) + 6 t (d + e + 1)
    the (e + 1) being the value columns and the normaliser's."""
    c = max(1, min(chunk, n))
    ep = e + 1.0
    total = 0.0
    r0 = 0
    while r0 < n:
        r = float(min(c, n - r0))
        t = r * (r + 1) / 2
        total += (10 * r * d * ep + 6 * t * (d + ep)) if backward else (4 * r * d * ep + 2 * t * (d + ep))
        r0 += c
    return bh * total


def flops(kernel, bh, n, d, e, backward):
    """Floating-point operations of a pass (a multiply-add counts 2):
    softmax_causal: forward 2 (n^2 / 2) (d + e) bh (QK^T and PV over the causal half), backward
                    2.5x forward (S recomputed, dP, dV, dK, dQ), as FlashAttention counts;
    linear_causal:  the chunked algorithm with C = 64 (linear_chunked_flops);
    delta_causal:   the token-by-token recurrence's count, 6 d e a token forward (S^T k, the
                    rank-1 write, the readout) and 21 d e backward, as cuda_attention_bench: the
                    chunked (WY) kernels of tarn and FLA do more, so the matmul fraction of a
                    delta rule row is a lower bound of its tensor-core use.
    forward+backward is the sum of the two."""
    if kernel == "softmax_causal":
        fwd = 2.0 * (float(n) * n * 0.5) * (d + e) * bh
        return 2.5 * fwd if backward else fwd
    if kernel == "linear_causal":
        return linear_chunked_flops(bh, n, d, e, backward)
    if kernel == "delta_causal":
        return (21.0 if backward else 6.0) * bh * n * d * e
    raise ValueError(kernel)


def fractions(row, ceilings):
    """Adds to `row` its bytes, FLOPs and, given the ceilings, the fractions: bytes / copy
    bandwidth over the time (frac_copy), FLOPs / matmul rate over the time (frac_mm: the bf16
    rate for bf16 rows, the f32 one, TF32 off, for f32 rows) and the larger of the two
    (frac_roofline: 1 is the roofline), for the forward and for forward+backward."""
    k, bh, n, d, e = row["kernel"], row["bh"], row["n"], row["d"], row.get("e", row["d"])
    elem = 2 if row["precision"] == "bf16" else 4
    bf, bb = bytes_moved(k, bh, n, d, e, elem, False), bytes_moved(k, bh, n, d, e, elem, True)
    ff, fb = flops(k, bh, n, d, e, False), flops(k, bh, n, d, e, True)
    row["bytes_fwd"], row["bytes_fwdbwd"] = bf, bf + bb
    row["flops_fwd"], row["flops_fwdbwd"] = ff, ff + fb
    copy_bw = (ceilings or {}).get("copy_bytes_per_s")
    mm_key = "matmul_bf16_flops_per_s" if row["precision"] == "bf16" else "matmul_f32_flops_per_s"
    mm = (ceilings or {}).get(mm_key)
    row["mm_ceiling"] = mm_key
    for tag in ("fwd", "fwdbwd"):
        ms = row.get(tag + "_ms")
        if row.get("status") != "ok" or not ms:
            continue
        t = ms * 1e-3
        fc = row["bytes_" + tag] / copy_bw / t if copy_bw else None
        fm = row["flops_" + tag] / mm / t if mm else None
        row["frac_copy_" + tag] = fc
        row["frac_mm_" + tag] = fm
        row["frac_roofline_" + tag] = max(x for x in (fc, fm) if x is not None) if (fc or fm) else None
    return row


# ---------------------------------------------------------------------------------------------
# report: merge and table

def _load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, "missing (%s)" % path
    except (OSError, ValueError) as e:
        return None, "unreadable (%s: %s)" % (path, e)


def tarn_rows(bench):
    """cuda_attention_bench --json rows as perf rows (impl "tarn")."""
    rows = []
    for r in bench.get("rows", []):
        if r.get("kernel") not in KERNELS:
            continue
        if r.get("algo", "").endswith("_recurrent"):
            continue  # the forced recurrence is the bench's own comparison, not the perf table's
        row = {
            "kernel": r["kernel"], "impl": "tarn", "precision": r.get("precision", "f32"),
            "bh": r["bh"], "n": r["n"], "d": r["d"], "e": r.get("e", r["d"]),
            "status": r.get("status", "?"), "algo": r.get("algo"),
        }
        for key in ("variant", "check", "fwd_ms", "fwd_ms_min", "fwd_ms_max", "fwd_repeats", "fwdbwd_ms",
                    "fwdbwd_ms_min", "fwdbwd_ms_max", "fwdbwd_repeats", "sets", "l2"):
            if key in r:
                row[key] = r[key]
        rows.append(row)
    return rows


def _key(row):
    return (row["kernel"], row["bh"], row["n"], row["d"])


def merge(torch_run, benches, quick=False):
    """The perf rows: tarn's (from the benches), the references' (from measure), and a row
    "not measured" for every expected (kernel, impl, precision, shape) that neither produced,
    sorted by kernel, head size, B*H, N, then tarn f32, tarn bf16, the reference."""
    rows = []
    for b in benches:
        rows.extend(tarn_rows(b))
    if torch_run:
        rows.extend(dict(r) for r in torch_run.get("rows", []))
    have = {(r["kernel"], r["impl"], r["precision"], r["bh"], r["n"], r["d"]) for r in rows}

    def why_missing(impl):
        if impl == "tarn":
            return "not measured (the bench did not reach it: see perf.log)"
        if not torch_run:
            return "not measured (measure wrote nothing: see perf.log)"
        if torch_run.get("errors") and not torch_run.get("rows"):
            return "unavailable: %s" % torch_run["errors"][0]
        if impl == "fla" and str(torch_run.get("fla", "")).startswith("unavailable"):
            return "fla: %s" % torch_run["fla"]
        return "not measured (measure did not reach it: see perf.log)"

    for kernel in KERNELS:
        for bh, n, d in shapes(kernel, quick):
            for impl, prec in (("tarn", "f32"), ("tarn", "bf16"), (REFERENCE[kernel], "bf16")):
                if (kernel, impl, prec, bh, n, d) not in have:
                    rows.append({"kernel": kernel, "impl": impl, "precision": prec, "bh": bh, "n": n, "d": d,
                                 "e": d, "status": why_missing(impl)})
    ceilings = (torch_run or {}).get("ceilings") or {}
    for r in rows:
        fractions(r, ceilings)
    refs = {_key(r): r for r in rows if r["impl"] == REFERENCE[r["kernel"]] and r.get("status") == "ok"}
    for r in rows:
        if r["impl"] != "tarn" or r.get("status") != "ok":
            continue
        ref = refs.get(_key(r))
        if not ref:
            continue
        r["ref_impl"] = ref["impl"]
        for tag in ("fwd", "fwdbwd"):
            if r.get(tag + "_ms") and ref.get(tag + "_ms"):
                # tarn's time over the reference's: above 1, tarn is slower.
                r["ratio_" + tag] = r[tag + "_ms"] / ref[tag + "_ms"]
    order = {"linear_causal": 0, "delta_causal": 1, "softmax_causal": 2}
    impl_order = {("tarn", "f32"): 0, ("tarn", "bf16"): 1}
    rows.sort(key=lambda r: (order.get(r["kernel"], 9), r["d"], r["bh"], r["n"],
                             impl_order.get((r["impl"], r["precision"]), 2), r["impl"]))
    return rows


IMPL_NAMES = {"tarn": "tarn", "fla": "FLA", "sdpa": "SDPA"}


def _ms(x):
    if x is None:
        return "-"
    return "%.3f" % x if x < 10 else "%.1f" % x if x < 1000 else "%.0f" % x


def _pct(x):
    return "-" if x is None else ("%.1f" % (100 * x) if x < 0.1 else "%.0f" % (100 * x))


def _ratio(x):
    return "-" if x is None else "%.2fx" % x


def table(rows):
    """The markdown table: one line a row; times in ms (median); '% copy / % mm': the fractions of
    the copy bandwidth and of the matmul rate; 'vs ref': tarn's time over the reference's."""
    head = ("| kernel | impl | B·H | N | d | fwd ms | fwd+bwd ms | fwd % copy / mm | fwd+bwd % copy / mm "
            "| vs ref fwd | vs ref fwd+bwd |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        impl = "%s %s" % (IMPL_NAMES.get(r["impl"], r["impl"]), r["precision"])
        shape = "| %s | %s | %d | %d | %d " % (r["kernel"], impl, r["bh"], r["n"], r["d"])
        if r.get("status") != "ok":
            note = r.get("status", "?")
            note = note if len(note) <= 90 else note[:87] + "..."
            lines.append(shape + "| %s | | | | | |" % note.replace("|", "/"))
            continue
        lines.append(shape + "| %s | %s | %s / %s | %s / %s | %s | %s |" % (
            _ms(r.get("fwd_ms")), _ms(r.get("fwdbwd_ms")),
            _pct(r.get("frac_copy_fwd")), _pct(r.get("frac_mm_fwd")),
            _pct(r.get("frac_copy_fwdbwd")), _pct(r.get("frac_mm_fwdbwd")),
            _ratio(r.get("ratio_fwd")), _ratio(r.get("ratio_fwdbwd"))))
    return "\n".join(lines) + "\n"


def summary_lines(doc):
    c = doc.get("ceilings") or {}
    gpu = doc.get("gpu") or {}

    def num(x, scale, unit, fmt="%.2f"):
        return (fmt % (x / scale) + " " + unit) if isinstance(x, (int, float)) else "not measured"

    return [
        "tarn commit %s (%s), %s" % (doc.get("commit_short"), doc.get("tarn_version") or "tarn --version: -",
                                     doc.get("date")),
        "GPU: %s, driver %s; torch %s, triton %s, FLA: %s" % (
            gpu.get("name"), gpu.get("driver"), (doc.get("versions") or {}).get("torch"),
            (doc.get("versions") or {}).get("triton"), doc.get("fla")),
        "ceilings measured in this run: copy %s (read + write), bf16 matmul %s, f32 matmul %s" % (
            num(c.get("copy_bytes_per_s"), 1e12, "TB/s"), num(c.get("matmul_bf16_flops_per_s"), 1e12, "TFLOP/s", "%.0f"),
            num(c.get("matmul_f32_flops_per_s"), 1e12, "TFLOP/s", "%.1f")),
    ]


def report(args):
    torch_run, torch_err = _load(args.torch)
    benches, sources = [], []
    for path in args.tarn:
        b, err = _load(path)
        sources.append({"path": os.path.basename(path), "error": err} if err else {
            "path": os.path.basename(path), "complete": b.get("complete"), "note": b.get("note"),
            "device": b.get("device"), "timing": b.get("timing"), "checks": b.get("checks")})
        if b:
            benches.append(b)
    rows = merge(torch_run, benches, quick=args.quick)
    commit = (args.commit or "unknown").strip()
    short = commit[:7] if commit != "unknown" else "unknown"
    date = datetime.datetime.now(datetime.timezone.utc)
    day = args.date or date.strftime("%Y-%m-%d")
    doc = {
        "schema": "tarn-gpu-perf/1",
        "commit": commit,
        "commit_short": short,
        "dirty": bool(args.dirty),
        "tarn_version": args.tarn_version,
        "bundle_build_info": args.build_info,
        "date": date.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": (torch_run or {}).get("gpu") or {},
        "versions": (torch_run or {}).get("versions") or {},
        "fla": (torch_run or {}).get("fla") or ("unavailable (%s)" % (torch_err or "measure did not run")),
        "ceilings": (torch_run or {}).get("ceilings") or {},
        "method": {
            "timing": "CUDA events around each call; median of >= 10 calls after untimed warm-up calls; the "
                      "calls go round copies of the inputs, >= 3x L2 in all (tarn: cuda_attention_bench --rotate; "
                      "a 2x L2 memset before each call where one copy only fits)",
            "data": "random: normal for torch/FLA (q, k unit rows for the delta rule, beta in (0.1, 0.9), "
                    "g = log(alpha), alpha in (0.9, 1)); tarn's bench: uniform in [-1, 1], same gates",
            "bytes": bytes_moved.__doc__.strip(),
            "flops": flops.__doc__.strip(),
            "fractions": fractions.__doc__.strip(),
            "ratio": "ratio_fwd, ratio_fwdbwd: tarn's time over the reference's (FLA for linear_causal and "
                     "delta_causal, SDPA's flash backend for softmax_causal), same shape; above 1 tarn is slower",
            "shapes": "B*H in {8, 128}, N in {1024, 4096, 16384}, d = e = 64, and 128 for delta_causal; "
                      "torch/FLA as B = B*H/8 batches of 8 heads",
            "torch": (torch_run or {}).get("method"),
        },
        "steps": dict(s.split("=", 1) for s in args.step if "=" in s),
        "fla_autotune": (torch_run or {}).get("fla_autotune"),
        "prewarm": (torch_run or {}).get("prewarm"),
        "sources": {"tarn_bench": sources, "measure": {"path": os.path.basename(args.torch), "error": torch_err,
                                                       "complete": (torch_run or {}).get("complete"),
                                                       "errors": (torch_run or {}).get("errors")}},
        "rows": rows,
    }
    name = "perf-%s-%s%s.json" % (day, short, "-dirty" if args.dirty else "")
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
    text = table(rows)
    with open(os.path.join(args.out_dir, "perf_table.md"), "w") as f:
        f.write("\n".join("- " + s for s in summary_lines(doc)) + "\n\n" + text)
    if args.quiet:
        return path
    print("\n".join(summary_lines(doc)))
    print()
    print(text, end="")
    print("[gpu_perf] %s" % path)
    return path


# ---------------------------------------------------------------------------------------------
# measure (torch, on the GPU)

class Deadline:
    def __init__(self, epoch_s):
        self.epoch_s = epoch_s

    def left(self):
        return float("inf") if not self.epoch_s else self.epoch_s - time.time()

    def spent(self, margin=0.0):
        return self.left() <= margin


def _write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def log(*parts):
    print("[gpu_perf]", *parts, flush=True)


def measure(args):
    doc = {"tool": "gpu_perf.py measure", "complete": False, "gpu": {}, "versions": {
        "python": platform.python_version()}, "fla": "unavailable (not tried)", "ceilings": {}, "rows": [],
        "errors": [], "method": {}}
    deadline = Deadline(args.deadline)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure: no torch here)
        doc["fla"] = "unavailable (no torch: %s)" % e
        doc["errors"].append("torch: %s" % e)
        doc["complete"] = True
        _write(args.out, doc)
        log("no torch (%s): nothing measured" % e)
        return 0
    doc["versions"]["torch"] = torch.__version__
    doc["versions"]["cuda"] = torch.version.cuda
    try:
        import triton
        doc["versions"]["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        doc["versions"]["triton"] = "unavailable (%s)" % e
    if not torch.cuda.is_available():
        doc["errors"].append("torch sees no CUDA device")
        doc["fla"] = "unavailable (torch sees no CUDA device)"
        doc["complete"] = True
        _write(args.out, doc)
        log("torch sees no CUDA device: nothing measured")
        return 0
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
    doc["gpu"] = {"name": props.name, "sms": props.multi_processor_count, "memory_bytes": props.total_memory,
                  "l2_bytes": l2, "capability": "%d.%d" % (props.major, props.minor), "driver": _driver()}
    doc["method"] = {
        "timing": "torch.cuda.Event around each call, synchronised after it; median of %d calls after %d "
                  "untimed ones; copies of the inputs (>= 3x L2 in all, at most 32) gone round, else a 2x L2 "
                  "buffer written before each call" % (args.repeats, args.warmup),
        "forward": "with autograd recording (inputs require grad), as in training",
        "forward_backward": "forward, then torch.autograd.grad of the output against every input with a random "
                            "d_out (no .grad accumulation)",
        "sdpa": "torch.nn.functional.scaled_dot_product_attention(is_causal=True) under "
                "sdpa_kernel(SDPBackend.FLASH_ATTENTION), q, k, v [B, H, N, d]",
        "fla_linear": "fla.ops.linear_attn.chunk_linear_attn(normalize=True, scale=None) on [B, N, H, d] with "
                      "the feature map elu(x) + 1 applied by torch inside the timed call (tarn fuses it); "
                      "fwd_ms_kernel_only / fwdbwd_ms_kernel_only: the same with the map applied outside it",
        "fla_delta": "fla.ops.gated_delta_rule.chunk_gated_delta_rule(g, beta, scale=1.0, "
                     "use_qk_l2norm_in_kernel=False) on unit q, k rows [B, N, H, d] (bf16), g = log(alpha) (f32), "
                     "beta (bf16), as tarn's layer hands its kernels unit rows",
    }
    _write(args.out, doc)
    log("GPU %s, %d SMs, L2 %d MiB; torch %s" % (props.name, props.multi_processor_count, l2 >> 20,
                                                  torch.__version__))
    timer = Timer(torch, l2, args.repeats, args.warmup)
    try:
        doc["ceilings"] = ceilings(torch)
        log("ceilings: copy %.2f TB/s, bf16 matmul %.0f TFLOP/s, f32 matmul %.1f TFLOP/s" % (
            doc["ceilings"]["copy_bytes_per_s"] / 1e12, doc["ceilings"]["matmul_bf16_flops_per_s"] / 1e12,
            doc["ceilings"]["matmul_f32_flops_per_s"] / 1e12))
    except Exception as e:  # noqa: BLE001
        doc["errors"].append("ceilings: %r" % e)
        log("ceilings failed: %r" % e)
    _write(args.out, doc)

    def run_rows(kernel, impl, make, quick):
        for bh, n, d in shapes(kernel, quick):
            if kernel == "delta_causal" and d not in args.delta_ds:
                continue
            row = {"kernel": kernel, "impl": impl, "precision": "bf16", "bh": bh, "n": n, "d": d, "e": d,
                   "batch": bh // HEADS, "heads": HEADS}
            if deadline.spent():
                row["status"] = "skipped: time budget spent"
            else:
                try:
                    row.update(timer.row(make, bh, n, d))
                    row["status"] = "ok"
                except Exception as e:  # noqa: BLE001 (out of memory, an unsupported shape, a failed compile)
                    oom = isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)
                    row["status"] = ("unsupported: out of device memory (%s)" if oom else "failed: %s") % _short(e)
                torch.cuda.empty_cache()  # after the except block, which holds the failed call's frames
            doc["rows"].append(row)
            _write(args.out, doc)
            log(_row_line(row))

    run_rows("softmax_causal", "sdpa", sdpa_maker(torch), args.quick)

    fla, why = import_fla(args)
    if fla is None:
        doc["fla"] = "unavailable (%s)" % why
        log("FLA unavailable: %s" % why)
    else:
        doc["fla"] = fla["version"]
        doc["versions"]["fla"] = fla["version"]
        doc["fla_autotune"] = fla["autotune"]
        prewarm(args, deadline, doc)
        _write(args.out, doc)
        for kernel, maker in (("linear_causal", fla_linear_maker(torch, fla)),
                              ("delta_causal", fla_delta_maker(torch, fla))):
            run_rows(kernel, "fla", maker, args.quick)
        doc["fla_autotune"] = fla["autotune"]
    doc["complete"] = True
    _write(args.out, doc)
    return 0


def _short(e):
    text = "%s: %s" % (type(e).__name__, e)
    text = " ".join(text.split())
    return text if len(text) < 300 else text[:297] + "..."


def _row_line(r):
    if r.get("status") != "ok":
        return "%s %s B*H=%d N=%d d=%d: %s" % (r["kernel"], r["impl"], r["bh"], r["n"], r["d"], r["status"])
    return "%s %s B*H=%d N=%d d=%d: fwd %.3f ms, fwd+bwd %.3f ms (%d copies, first call %.1f s)" % (
        r["kernel"], r["impl"], r["bh"], r["n"], r["d"], r["fwd_ms"], r["fwdbwd_ms"], r["sets"],
        r.get("first_call_s", 0))


def _driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        return out[0] if out else None
    except Exception:  # noqa: BLE001
        return None


def ceilings(torch):
    """The copy bandwidth (bytes read + written per second, a 2 GiB device-to-device copy) and the
    bf16 and f32 (TF32 off) matrix rates (an 8192^3 product on random normal data); each the
    median of 20 timed runs after 3 untimed ones."""
    def median_ms(fn, reps=20, warm=3):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        return times[len(times) // 2]

    nbytes = 2 << 30
    src = torch.randn(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src))
    del src, dst
    n = 8192
    out = {"copy_bytes_per_s": 2.0 * nbytes / (copy_ms * 1e-3), "copy_bytes": nbytes, "copy_ms": copy_ms}
    for dtype, key in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            ms = median_ms(lambda: torch.mm(a, b))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
        out["matmul_%s_flops_per_s" % key] = 2.0 * n ** 3 / (ms * 1e-3)
        out["matmul_%s_ms" % key] = ms
        del a, b
    out["method"] = ("copy: dst.copy_(src), 2 GiB f32, bytes read + written over the time; matmul: torch.mm of "
                     "two random normal 8192 x 8192 matrices, 2 * 8192^3 FLOPs over the time (f32 with TF32 off); "
                     "medians of 20 after 3 untimed runs")
    torch.cuda.empty_cache()
    return out


class Timer:
    """Times make(bh, n, d)'s calls: make returns (inputs_factory, fwd, fwdbwd[, extras]) where
    inputs_factory() makes one copy of the inputs (a dict of tensors) and fwd(inputs),
    fwdbwd(inputs) run one call."""

    def __init__(self, torch, l2, repeats, warmup):
        self.torch, self.l2, self.repeats, self.warmup = torch, l2, repeats, warmup
        self.flush = None

    def _median(self, fns):
        torch = self.torch
        call = 0
        for _ in range(self.warmup):
            fns[call % len(fns)]()
            call += 1
        torch.cuda.synchronize()
        if len(fns) == 1 and self.flush is None:
            self.flush = torch.empty(2 * self.l2, dtype=torch.uint8, device="cuda")
        times = []
        for _ in range(self.repeats):
            if len(fns) == 1:
                self.flush.fill_(len(times) & 0xFF)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[call % len(fns)]()
            e.record()
            e.synchronize()
            call += 1
            times.append(s.elapsed_time(e))
        times.sort()
        return {"ms": times[len(times) // 2], "min": times[0], "max": times[-1], "repeats": len(times)}

    def row(self, make, bh, n, d):
        torch = self.torch
        factory, fwd, fwdbwd, extra = make(bh, n, d)
        first = factory()
        set_bytes = sum(t.numel() * t.element_size() for t in first.values())
        # outputs and gradients: about as many bytes again
        set_bytes *= 2
        sets = max(1, min(32, int(math.ceil(3.0 * self.l2 / set_bytes))))
        free, _ = torch.cuda.mem_get_info()
        while sets > 1 and sets * set_bytes > 0.5 * free:
            sets -= 1
        copies = [first] + [factory() for _ in range(sets - 1)]
        t0 = time.time()
        fwdbwd(first)  # the first call compiles (Triton) and autotunes: untimed
        torch.cuda.synchronize()
        first_call_s = time.time() - t0
        row = {"sets": sets, "set_bytes": set_bytes, "first_call_s": round(first_call_s, 2)}
        for tag, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
            m = self._median([(lambda c=c: fn(c)) for c in copies])
            row[tag + "_ms"], row[tag + "_ms_min"], row[tag + "_ms_max"], row[tag + "_repeats"] = (
                m["ms"], m["min"], m["max"], m["repeats"])
        for tag, fn in (extra or {}).items():
            m = self._median([(lambda c=c: fn(c)) for c in copies])
            row[tag] = m["ms"]
        del copies, first
        torch.cuda.empty_cache()
        return row


def sdpa_maker(torch):
    import torch.nn.functional as F
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch
        SDPBackend, sdpa_kernel = None, None

    def call(c):
        if sdpa_kernel is None:
            with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False):
                return F.scaled_dot_product_attention(c["q"], c["k"], c["v"], is_causal=True)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(c["q"], c["k"], c["v"], is_causal=True)

    def make(bh, n, d):
        b = bh // HEADS

        def factory():
            kw = dict(device="cuda", dtype=torch.bfloat16)
            return {"q": torch.randn(b, HEADS, n, d, **kw).requires_grad_(),
                    "k": torch.randn(b, HEADS, n, d, **kw).requires_grad_(),
                    "v": torch.randn(b, HEADS, n, d, **kw).requires_grad_(),
                    "do": torch.randn(b, HEADS, n, d, **kw)}

        def fwd(c):
            return call(c)

        def fwdbwd(c):
            o = call(c)
            return torch.autograd.grad(o, (c["q"], c["k"], c["v"]), c["do"])

        return factory, fwd, fwdbwd, None

    return make


def import_fla(args):
    """FLA, with Triton's autotuning bounded: each config benchmarked for at most ~--autotune-rep-ms
    (instead of Triton's 25 ms warm-up + 100 ms), and at most --fla-max-configs configs a kernel
    (evenly spaced through its list; 0: all). Returns ({version, chunk_linear_attn,
    chunk_gated_delta_rule, autotune}, None) or (None, why)."""
    try:
        import triton  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return None, "no triton: %s" % _short(e)
    autotune = bound_autotuning(args.fla_max_configs, args.autotune_warmup_ms, args.autotune_rep_ms)
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.linear_attn import chunk_linear_attn
    except Exception as e:  # noqa: BLE001
        return None, "cannot import fla: %s" % _short(e)
    return {"version": getattr(fla, "__version__", "?"), "chunk_linear_attn": chunk_linear_attn,
            "chunk_gated_delta_rule": chunk_gated_delta_rule, "autotune": autotune}, None


def bound_autotuning(max_configs, warmup_ms, rep_ms, once=False):
    """Patches triton's Autotuner (before FLA creates its autotuners): its benchmark of a config
    becomes triton.testing.do_bench(warmup_ms, rep_ms) (or, `once`, a single untimed launch: the
    prewarm processes only compile), and its configs are cut to max_configs (evenly spaced) where
    a kernel has more. Returns what it did, with a count per kernel, for the JSON."""
    info = {"max_configs": max_configs, "bench_warmup_ms": warmup_ms, "bench_rep_ms": rep_ms, "kernels": {},
            "patched": False}
    try:
        import triton.testing
        from triton.runtime import autotuner as at
    except Exception as e:  # noqa: BLE001
        info["why_not"] = _short(e)
        return info

    def bench(kernel_call, quantiles=None, **_):
        if once:
            kernel_call()
            return [1.0] * len(quantiles) if quantiles else 1.0
        return triton.testing.do_bench(kernel_call, warmup=warmup_ms, rep=rep_ms, quantiles=quantiles)

    original_init = at.Autotuner.__init__
    original_prune = at.Autotuner.prune_configs

    def init(self, *a, **k):
        original_init(self, *a, **k)
        self.__dict__["do_bench"] = bench  # shadows Triton's cached property (or attribute)

    def prune(self, *a, **k):
        configs = original_prune(self, *a, **k)
        name = getattr(getattr(self, "base_fn", None), "__name__", "?")
        kept = configs
        if max_configs and len(configs) > max_configs:
            step = len(configs) / float(max_configs)
            kept = [configs[int(i * step)] for i in range(max_configs)]
        seen = info["kernels"].setdefault(name, {"configs": len(configs), "kept": len(kept), "tunings": 0})
        seen["tunings"] += 1
        return kept

    at.Autotuner.__init__ = init
    at.Autotuner.prune_configs = prune
    info["patched"] = True
    return info


def fla_linear_maker(torch, fla):
    import torch.nn.functional as F
    op = fla["chunk_linear_attn"]

    def make(bh, n, d):
        b = bh // HEADS

        def factory():
            kw = dict(device="cuda", dtype=torch.bfloat16)
            c = {"q": torch.randn(b, n, HEADS, d, **kw).requires_grad_(),
                 "k": torch.randn(b, n, HEADS, d, **kw).requires_grad_(),
                 "v": torch.randn(b, n, HEADS, d, **kw).requires_grad_(),
                 "do": torch.randn(b, n, HEADS, d, **kw)}
            with torch.no_grad():  # the mapped inputs for the kernel-only timing
                c["qf"] = (F.elu(c["q"]) + 1).requires_grad_()
                c["kf"] = (F.elu(c["k"]) + 1).requires_grad_()
            return c

        def fwd(c):
            return op(F.elu(c["q"]) + 1, F.elu(c["k"]) + 1, c["v"], normalize=True)[0]

        def fwdbwd(c):
            o = fwd(c)
            return torch.autograd.grad(o, (c["q"], c["k"], c["v"]), c["do"])

        def fwd_kernel(c):
            return op(c["qf"], c["kf"], c["v"], normalize=True)[0]

        def fwdbwd_kernel(c):
            o = fwd_kernel(c)
            return torch.autograd.grad(o, (c["qf"], c["kf"], c["v"]), c["do"])

        return factory, fwd, fwdbwd, {"fwd_ms_kernel_only": fwd_kernel, "fwdbwd_ms_kernel_only": fwdbwd_kernel}

    return make


def fla_delta_maker(torch, fla):
    import torch.nn.functional as F
    op = fla["chunk_gated_delta_rule"]

    def make(bh, n, d):
        b = bh // HEADS

        def factory():
            kw = dict(device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                q = F.normalize(torch.randn(b, n, HEADS, d, device="cuda"), dim=-1).to(torch.bfloat16)
                k = F.normalize(torch.randn(b, n, HEADS, d, device="cuda"), dim=-1).to(torch.bfloat16)
                alpha = torch.empty(b, n, HEADS, device="cuda").uniform_(0.9, 1.0)
                beta = torch.empty(b, n, HEADS, device="cuda").uniform_(0.1, 0.9).to(torch.bfloat16)
            return {"q": q.requires_grad_(), "k": k.requires_grad_(),
                    "v": torch.randn(b, n, HEADS, d, **kw).requires_grad_(),
                    "g": alpha.log().requires_grad_(), "beta": beta.requires_grad_(),
                    "do": torch.randn(b, n, HEADS, d, **kw)}

        def fwd(c):
            return op(c["q"], c["k"], c["v"], g=c["g"], beta=c["beta"], scale=1.0,
                      use_qk_l2norm_in_kernel=False)[0]

        def fwdbwd(c):
            o = fwd(c)
            return torch.autograd.grad(o, (c["q"], c["k"], c["v"], c["g"], c["beta"]), c["do"])

        return factory, fwd, fwdbwd, None

    return make


def prewarm(args, deadline, doc):
    """Compiles FLA's Triton kernels in parallel processes (one per op and head size) before the
    timings; each compiled config lands in Triton's on-disk cache, where the timing process's
    autotuning finds it. Bounded by --prewarm-timeout and the deadline; a failure only costs
    time (the timing process compiles what is missing)."""
    if args.no_prewarm:
        doc["prewarm"] = "off"
        return
    jobs = [("linear", 64)] + [("delta", d) for d in args.delta_ds]
    limit = min(args.prewarm_timeout, max(0.0, deadline.left() - 90))
    if limit < 30:
        doc["prewarm"] = "skipped: too little time left"
        return
    env = dict(os.environ, FLA_CACHE_RESULTS="0", PYTHONUNBUFFERED="1")
    started = time.time()
    procs = []
    for op, d in jobs:
        cmd = [sys.executable, os.path.abspath(__file__), "prewarm", "--op", op, "--d", str(d),
               "--bh", ",".join(str(x) for x in BHS), "--fla-max-configs", str(args.fla_max_configs)]
        procs.append(((op, d), subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                text=True)))
    report_ = {}
    for (op, d), p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, limit - (time.time() - started)))
            report_["%s_d%d" % (op, d)] = {"exit": p.returncode, "tail": out.strip().splitlines()[-3:]}
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            report_["%s_d%d" % (op, d)] = {"exit": "timed out after %.0f s" % limit,
                                           "tail": (out or "").strip().splitlines()[-3:]}
    doc["prewarm"] = {"seconds": round(time.time() - started, 1), "jobs": report_}
    log("prewarm (parallel Triton compilation) took %.0f s: %s" % (
        time.time() - started, ", ".join("%s exit %s" % (k, v["exit"]) for k, v in report_.items())))


def prewarm_main(args):
    import torch
    autotune_info = bound_autotuning(args.fla_max_configs, 0, 0, once=True)
    fla, why = None, None
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.linear_attn import chunk_linear_attn
        fla = {"chunk_linear_attn": chunk_linear_attn, "chunk_gated_delta_rule": chunk_gated_delta_rule}
    except Exception as e:  # noqa: BLE001
        why = _short(e)
    if fla is None:
        print("cannot import fla: %s" % why)
        return 1
    maker = (fla_linear_maker if args.op == "linear" else fla_delta_maker)(torch, fla)
    t0 = time.time()
    for bh in args.bh:
        factory, fwd, fwdbwd, extra = maker(bh, 1024, args.d)
        c = factory()
        fwdbwd(c)
        for fn in (extra or {}).values():
            fn(c)
        torch.cuda.synchronize()
        print("prewarm %s d=%d B*H=%d: %.1f s" % (args.op, args.d, bh, time.time() - t0), flush=True)
    print("kernels: %d, configs compiled: %d" % (
        len(autotune_info["kernels"]), sum(k["kept"] for k in autotune_info["kernels"].values())))
    return 0


# ---------------------------------------------------------------------------------------------
# selftest

def selftest(_args):
    import tempfile
    failures = []
    count = [0]

    def check(cond, what):
        count[0] += 1
        if not cond:
            failures.append(what)

    def close(a, b, rel=1e-12):
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)

    # Formulas, against numbers worked out by hand.
    check(close(flops("softmax_causal", 8, 1024, 64, 64, False), 8 * 1024 * 1024 * 128.0),
          "softmax forward FLOPs = bh n^2 (d + e)")
    check(close(flops("softmax_causal", 8, 1024, 64, 64, True), 2.5 * 8 * 1024 * 1024 * 128.0),
          "softmax backward FLOPs = 2.5x forward")
    # linear, one chunk of 64 rows, d = e = 64: 4*64*64*65 + 2*2080*129 = 1,064,960 + 536,640
    check(close(linear_chunked_flops(1, 64, 64, 64, False), 1064960 + 536640), "linear forward FLOPs, one chunk")
    check(close(linear_chunked_flops(1, 64, 64, 64, True), 10 * 64 * 64 * 65 + 6 * 2080 * 129),
          "linear backward FLOPs, one chunk")
    check(close(linear_chunked_flops(2, 100, 8, 8, False),
                2 * ((4 * 64 * 8 * 9 + 2 * 2080 * 17) + (4 * 36 * 8 * 9 + 2 * 666 * 17))),
          "linear FLOPs over a partial last chunk")
    check(close(flops("delta_causal", 8, 1024, 64, 64, False), 6.0 * 8 * 1024 * 64 * 64), "delta forward FLOPs")
    check(close(flops("delta_causal", 8, 1024, 64, 64, True), 21.0 * 8 * 1024 * 64 * 64), "delta backward FLOPs")
    check(close(bytes_moved("linear_causal", 8, 1024, 64, 64, 2, False), 2.0 * 8 * 1024 * 256),
          "forward bytes: q, k, v read, out written")
    check(close(bytes_moved("linear_causal", 8, 1024, 64, 64, 4, True), 4.0 * 8 * 1024 * 448),
          "backward bytes: q, k, v, dout read, dq, dk, dv written")
    check(close(bytes_moved("delta_causal", 8, 1024, 64, 64, 2, False), 2.0 * 8 * 1024 * 256 + 8.0 * 8 * 1024),
          "delta forward bytes include the gates")

    # The merge, on a fake run.
    ceil = {"copy_bytes_per_s": 4.0e12, "matmul_bf16_flops_per_s": 800e12, "matmul_f32_flops_per_s": 50e12}
    bench64 = {"complete": True, "checks": [], "rows": [
        {"algo": "linear_causal_bf16", "kernel": "linear_causal", "precision": "bf16", "bh": 8, "n": 1024, "d": 64,
         "e": 64, "status": "ok", "fwd_ms": 0.2, "fwdbwd_ms": 0.8, "sets": 12, "check": "ok"},
        {"algo": "linear_causal_f32", "kernel": "linear_causal", "precision": "f32", "bh": 8, "n": 1024, "d": 64,
         "e": 64, "status": "ok", "fwd_ms": 0.25, "fwdbwd_ms": 1.0, "sets": 6, "check": "ok"},
        {"algo": "softmax_causal_bf16", "kernel": "softmax_causal", "precision": "bf16", "bh": 8, "n": 1024,
         "d": 64, "e": 64, "status": "ok", "fwd_ms": 0.1, "fwdbwd_ms": 0.5},
        {"algo": "delta_causal_f32_recurrent", "kernel": "delta_causal", "precision": "f32", "bh": 8, "n": 1024,
         "d": 64, "e": 64, "status": "ok", "fwd_ms": 9.0, "fwdbwd_ms": 30.0},
        {"algo": "linear_bidir_f32", "kernel": "linear_bidir", "precision": "f32", "bh": 8, "n": 1024,
         "d": 64, "e": 64, "status": "ok", "fwd_ms": 9.0, "fwdbwd_ms": 30.0},
    ]}
    bench128 = {"complete": False, "checks": [], "rows": [
        {"algo": "delta_causal_bf16", "kernel": "delta_causal", "precision": "bf16", "bh": 128, "n": 16384,
         "d": 128, "e": 128, "status": "unsupported: needs 200.0 GiB of device memory, 130.0 GiB free"}]}
    measured = {"complete": True, "fla": "0.6.0", "gpu": {"name": "Fake H200", "driver": "1.0"},
                "versions": {"torch": "2.11", "triton": "3.6"}, "ceilings": ceil, "rows": [
                    {"kernel": "linear_causal", "impl": "fla", "precision": "bf16", "bh": 8, "n": 1024, "d": 64,
                     "e": 64, "status": "ok", "fwd_ms": 0.4, "fwdbwd_ms": 1.6},
                    {"kernel": "softmax_causal", "impl": "sdpa", "precision": "bf16", "bh": 8, "n": 1024, "d": 64,
                     "e": 64, "status": "ok", "fwd_ms": 0.05, "fwdbwd_ms": 0.25}]}
    rows = merge(measured, [bench64, bench128])
    find = {(r["kernel"], r["impl"], r["precision"], r["bh"], r["n"], r["d"]): r for r in rows}
    lb = find.get(("linear_causal", "tarn", "bf16", 8, 1024, 64))
    check(lb is not None and close(lb["ratio_fwd"], 0.5) and close(lb["ratio_fwdbwd"], 0.5),
          "tarn / FLA ratio for linear attention")
    sb = find.get(("softmax_causal", "tarn", "bf16", 8, 1024, 64))
    check(sb is not None and close(sb["ratio_fwd"], 2.0) and sb.get("ref_impl") == "sdpa",
          "tarn / SDPA ratio for softmax")
    want_copy = bytes_moved("linear_causal", 8, 1024, 64, 64, 2, False) / 4.0e12 / 0.2e-3
    want_mm = flops("linear_causal", 8, 1024, 64, 64, False) / 800e12 / 0.2e-3
    check(lb is not None and close(lb["frac_copy_fwd"], want_copy) and close(lb["frac_mm_fwd"], want_mm)
          and close(lb["frac_roofline_fwd"], max(want_copy, want_mm)), "fractions of the ceilings (bf16)")
    lf = find.get(("linear_causal", "tarn", "f32", 8, 1024, 64))
    check(lf is not None and lf["mm_ceiling"] == "matmul_f32_flops_per_s"
          and close(lf["frac_mm_fwd"], flops("linear_causal", 8, 1024, 64, 64, False) / 50e12 / 0.25e-3),
          "f32 rows against the f32 matmul rate")
    check(not any(r.get("algo") == "delta_causal_f32_recurrent" for r in rows), "the forced recurrence is left out")
    check(not any(r["kernel"] == "linear_bidir" for r in rows), "kernels outside the perf set are left out")
    un = find.get(("delta_causal", "tarn", "bf16", 128, 16384, 128))
    check(un is not None and un["status"].startswith("unsupported: needs"), "an unsupported row passes through")
    missing = find.get(("delta_causal", "fla", "bf16", 8, 4096, 128))
    check(missing is not None and missing["status"].startswith("not measured (measure"), "missing rows are named")
    missing = find.get(("delta_causal", "tarn", "f32", 8, 4096, 128))
    check(missing is not None and missing["status"].startswith("not measured (the bench"), "missing tarn rows")
    no_fla = merge(dict(measured, fla="unavailable (cannot import fla: x)", rows=[]), [])
    check(all(r["status"] == "fla: unavailable (cannot import fla: x)" for r in no_fla if r["impl"] == "fla"),
          "FLA's absence named in its rows")
    expected = sum(3 * len(shapes(k)) for k in KERNELS)
    check(len(rows) == expected, "one row per kernel, impl, precision and shape: %d, want %d" % (len(rows), expected))
    text = table(rows)
    check(text.count("\n") == expected + 2, "the table has a line a row")
    check("| linear_causal | tarn bf16 | 8 | 1024 | 64 | 0.200 | 0.800 |" in text, "a table line")
    check("0.50x" in text, "the ratio in the table")

    # report end to end, into a temporary folder, FLA and torch absent.
    with tempfile.TemporaryDirectory() as tmp:
        tpath = os.path.join(tmp, "tarn_d64.json")
        with open(tpath, "w") as f:
            json.dump(bench64, f)
        mpath = os.path.join(tmp, "torch.json")
        with open(mpath, "w") as f:
            json.dump({"complete": True, "fla": "unavailable (no torch: No module named 'torch')", "rows": [],
                       "ceilings": {}}, f)
        ns = argparse.Namespace(torch=mpath, tarn=[tpath, os.path.join(tmp, "absent.json")], out_dir=tmp,
                                commit="0123456789abcdef", dirty=False, tarn_version="tarn 0.1.0 (commit 0123456789ab)",
                                build_info="built here", quick=False, quiet=True, step=["measure=exit 0 in 1 s"],
                                date="2026-12-02")
        path = report(ns)
        check(os.path.basename(path) == "perf-2026-12-02-0123456.json", "the file's name")
        with open(path) as f:
            doc = json.load(f)
        check(doc["commit"] == "0123456789abcdef" and doc["fla"].startswith("unavailable (no torch"),
              "commit and FLA's absence recorded")
        check(doc["sources"]["tarn_bench"][1]["error"].startswith("missing"), "a missing bench file is named")
        lb = [r for r in doc["rows"] if r["impl"] == "tarn" and r["kernel"] == "linear_causal"
              and r["precision"] == "bf16" and r["n"] == 1024 and r["bh"] == 8][0]
        check(lb["fwd_ms"] == 0.2 and lb.get("frac_copy_fwd") is None and "ratio_fwd" not in lb,
              "no ceilings, no FLA: the times kept, no fractions, no ratio")
        check(doc["steps"] == {"measure": "exit 0 in 1 s"}, "the steps recorded")
        check(os.path.exists(os.path.join(tmp, "perf_table.md")), "perf_table.md written")
    if failures:
        for f in failures:
            print("[gpu_perf selftest] FAIL:", f)
        print("[gpu_perf selftest] %d checks, %d failed" % (count[0], len(failures)))
        return 1
    print("[gpu_perf selftest] formulas, merge, ratios, fractions, table and report: %d checks, all passed"
          % count[0])
    return 0


# ---------------------------------------------------------------------------------------------

def _ints(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(prog="gpu_perf.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="torch and FLA on the GPU, into a JSON")
    m.add_argument("--out", required=True)
    m.add_argument("--deadline", type=float, default=0, help="epoch seconds after which no row starts")
    m.add_argument("--repeats", type=int, default=15)
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--quick", action="store_true", help="N = 1,024 and 4,096 only")
    m.add_argument("--delta-ds", type=_ints, default=[64, 128], help="head sizes of the delta rule (default 64,128)")
    m.add_argument("--fla-max-configs", type=int, default=16,
                   help="autotuning configs a Triton kernel at most (evenly spaced; 0: all)")
    m.add_argument("--autotune-warmup-ms", type=float, default=5)
    m.add_argument("--autotune-rep-ms", type=float, default=20)
    m.add_argument("--prewarm-timeout", type=float, default=240)
    m.add_argument("--no-prewarm", action="store_true")
    w = sub.add_parser("prewarm", help="(internal) compile one FLA op's Triton kernels")
    w.add_argument("--op", choices=("linear", "delta"), required=True)
    w.add_argument("--d", type=int, required=True)
    w.add_argument("--bh", type=_ints, default=list(BHS))
    w.add_argument("--fla-max-configs", type=int, default=16)
    r = sub.add_parser("report", help="merge, compute, write the JSON and the table")
    r.add_argument("--torch", required=True, help="measure's JSON")
    r.add_argument("--tarn", action="append", default=[], help="a cuda_attention_bench --json file (repeatable)")
    r.add_argument("--out-dir", required=True)
    r.add_argument("--commit", default="unknown")
    r.add_argument("--date", default=None, help="the day in the file's name (default: today, UTC)")
    r.add_argument("--dirty", action="store_true", help="the bundle was built with uncommitted changes")
    r.add_argument("--tarn-version", default=None)
    r.add_argument("--build-info", default=None)
    r.add_argument("--quick", action="store_true")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--step", action="append", default=[], help="NAME=how the step ended, for the JSON (repeatable)")
    sub.add_parser("selftest", help="the pure parts on fake rows (no torch, no GPU)")
    args = p.parse_args(argv)
    if args.cmd == "measure":
        if args.repeats < 10:
            p.error("--repeats must be at least 10 (the issue asks for a median of >= 10)")
        return measure(args)
    if args.cmd == "prewarm":
        return prewarm_main(args)
    if args.cmd == "report":
        report(args)
        return 0
    return selftest(args)


if __name__ == "__main__":
    sys.exit(main())
