#!/usr/bin/env python3
"""Training steps of tarn's BART-base recipes beside HuggingFace's BART in PyTorch, on one GPU
(issue 51, item 4). tools/gpu_check.sh perf runs it after the kernel comparison (gpu_perf.py).

  measure --out FILE --ns 512,2048 --tokens T [--steps S] [--warmup W] [--vocab V] [--deadline EPOCH_S]
      On the GPU: HF BartForConditionalGeneration with tarn's base preset (d_model 768, 6+6
      layers, 12 heads, FFN 3,072, vocabulary V = 8,000 as the base recipes' tokenizer, dropout
      0.1 on hidden states only, embeddings tied and unscaled), SDPA attention, bf16 autocast,
      torch.optim.AdamW(fused=True); at each N a batch of max(1, T // N) sequences of N random
      source and N random target tokens. Per N: W untimed steps, then S steps each timed with
      CUDA events; the figure is the median step; tokens/s counts source and target tokens, as
      `tarn bench train` does; peak memory is torch.cuda.max_memory_allocated over the timed
      steps (reset per N). FILE is rewritten after every N; a deadline stops before the next N.
      Without torch or a device it writes FILE saying so ("unavailable") and exits 0.
  report --torch FILE --tarn NAME=DIR [--tarn NAME=DIR ...] --out-dir DIR [--commit SHA] [--date D]
      Merges `tarn bench train --out DIR` (DIR/train.csv) of each recipe NAME with measure's
      rows: per N, each row's tokens/s, its ratio to PyTorch's, its peak memory and that ratio.
      Writes DIR/step-perf-<date>-<commit>.json and the table (--table FILE, default
      DIR/step_perf_table.md) and prints it.
      Standard library only: it runs without torch.
  selftest
      report's parsing, merge and table on fake files; no torch, no GPU.
"""

import argparse
import csv
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

BASE = dict(d_model=768, encoder_layers=6, decoder_layers=6, heads=12, ffn_dim=3072, vocab=8000)


# ---------------------------------------------------------------------------------------------
# measure (torch)

def hf_config(transformers, n, vocab):
    return transformers.BartConfig(
        vocab_size=vocab, d_model=BASE["d_model"], encoder_layers=BASE["encoder_layers"],
        decoder_layers=BASE["decoder_layers"], encoder_attention_heads=BASE["heads"],
        decoder_attention_heads=BASE["heads"], encoder_ffn_dim=BASE["ffn_dim"],
        decoder_ffn_dim=BASE["ffn_dim"], max_position_embeddings=max(1024, n), dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, scale_embedding=False, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, tie_word_embeddings=True)


def measure(args):
    try:
        import torch
        import transformers
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:  # recorded, as gpu_perf.py does: tarn's rows still come out
        with open(args.out, "w") as f:
            json.dump({"kind": "torch", "unavailable": "%s: %s" % (type(e).__name__, e), "rows": []}, f, indent=2)
        print("torch unavailable: %s" % e, flush=True)
        return 0
    dev = torch.device("cuda")
    out = {"kind": "torch", "torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0), "steps": args.steps, "warmup": args.warmup,
           "tokens": args.tokens, "vocab": args.vocab, "rows": []}
    for n in [int(x) for x in args.ns.split(",")]:
        if args.deadline and time.time() > args.deadline:
            out["rows"].append({"n": n, "status": "skipped: deadline"})
            break
        batch = max(1, args.tokens // n)
        row = {"n": n, "batch": batch}
        model = opt = None
        try:
            torch.manual_seed(1)
            model = transformers.BartForConditionalGeneration(hf_config(transformers, n, args.vocab))
            model.config._attn_implementation = "sdpa"
            model.to(dev).train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            g = torch.Generator(device=dev).manual_seed(7)
            ids = [torch.randint(4, args.vocab, (batch, n), device=dev, generator=g) for _ in range(3)]
            times = []
            torch.cuda.synchronize()
            for s in range(args.warmup + args.steps):
                if s == args.warmup:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=ids[0], decoder_input_ids=ids[1], labels=ids[2]).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                stop.record()
                if s >= args.warmup:
                    times.append((start, stop))
            torch.cuda.synchronize()
            ms = statistics.median(a.elapsed_time(b) for a, b in times)
            row.update(status="ok", step_ms=ms, tokens_per_s=2.0 * batch * n / (ms / 1e3),
                       peak_mib=torch.cuda.max_memory_allocated() / 1048576.0)
        except torch.cuda.OutOfMemoryError as e:  # noqa: PERF203
            row.update(status="out of memory: " + str(e).split("\n")[0][:120])
        except Exception as e:  # a row that fails says why; the others still run
            row.update(status="failed: %s: %s" % (type(e).__name__, str(e).split("\n")[0][:160]))
        del model, opt
        torch.cuda.empty_cache()
        out["rows"].append(row)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
        print("torch N=%d batch %d: %s" % (n, batch, row.get("status")), flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    return 0


# ---------------------------------------------------------------------------------------------
# report (standard library)

def read_tarn_csv(path):
    """Rows of `tarn bench train`'s CSV as dicts with numbers parsed (None where empty)."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            def num(key):
                v = (r.get(key) or "").strip()
                return float(v) if v else None
            rows.append({"attention": r.get("attention"), "precision": r.get("precision"), "n": int(r["N"]),
                         "batch": int(r["batch"]), "step_ms": num("step_ms"), "tokens_per_s": num("tokens_per_s"),
                         "peak_mib": num("alloc_peak_MiB"), "status": r.get("status", "")})
    return rows


def merge(torch_doc, tarn):
    """One row per (system, N): PyTorch's, then each tarn recipe's with its ratios to PyTorch's
    at the same N (tokens/s: tarn / torch, higher is better; memory: tarn / torch, lower is)."""
    ref = {r["n"]: r for r in (torch_doc or {}).get("rows", []) if r.get("status") == "ok"}
    rows = []
    for r in (torch_doc or {}).get("rows", []):
        rows.append(dict(r, system="pytorch-bart-sdpa-bf16"))
    for name, trows in tarn:
        for r in trows:
            row = dict(r, system="tarn " + name)
            t = ref.get(r["n"])
            if t and r.get("tokens_per_s") and r.get("status") == "ok":
                row["tokens_per_s_vs_torch"] = r["tokens_per_s"] / t["tokens_per_s"]
                if r.get("peak_mib") and t.get("peak_mib"):
                    row["peak_vs_torch"] = r["peak_mib"] / t["peak_mib"]
            rows.append(row)
    return sorted(rows, key=lambda r: (r["n"], r["system"] != "pytorch-bart-sdpa-bf16", r["system"]))


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def table(rows):
    lines = ["| N | system | batch | step ms | tokens/s | x PyTorch | peak MiB | x PyTorch mem | status |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["n"], r["system"], r.get("batch", ""), fmt(r.get("step_ms"), ".1f"), fmt(r.get("tokens_per_s"), ",.0f"),
            fmt(r.get("tokens_per_s_vs_torch"), ".2f"), fmt(r.get("peak_mib"), ",.0f"), fmt(r.get("peak_vs_torch"), ".2f"),
            r.get("status", "")))
    return "\n".join(lines) + "\n"


def report(args):
    torch_doc = None
    if args.torch and os.path.exists(args.torch):
        with open(args.torch) as f:
            torch_doc = json.load(f)
    tarn, missing = [], []
    for spec in args.tarn:
        name, _, d = spec.partition("=")
        path = os.path.join(d, "train.csv")
        if os.path.exists(path):
            tarn.append((name, read_tarn_csv(path)))
        else:
            missing.append(name)
    rows = merge(torch_doc, tarn)
    doc = {"issue": 51, "what": "training steps: tarn bench train beside HF BART (SDPA, bf16 autocast, fused AdamW)",
           "date": args.date, "commit": args.commit, "model": BASE,
           "torch": {k: v for k, v in (torch_doc or {}).items() if k != "rows"} or "unavailable",
           "missing": missing, "rows": rows}
    os.makedirs(args.out_dir, exist_ok=True)
    name = "step-perf-%s-%s.json" % (args.date, (args.commit or "unknown")[:12])
    with open(os.path.join(args.out_dir, name), "w") as f:
        json.dump(doc, f, indent=2)
    md = table(rows)
    with open(args.table or os.path.join(args.out_dir, "step_perf_table.md"), "w") as f:
        f.write(md)
    if not args.quiet:
        sys.stdout.write(md)
        if missing:
            print("no train.csv for: " + ", ".join(missing))
    return 0


def selftest(_args):
    # Here, not at the top: tools/gpu_check.sh's bundle carries this file alone, and measures.
    from selftest_files import write_files

    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(tmp, {
            "softmax/train.csv": (
                "attention,precision,N,batch,tokens_per_batch,step_ms,tokens_per_s,alloc_peak_MiB,rss_peak_MiB,status\n"
                "recipe,bf16,512,32,16384,100.0,327680,2000.0,900.0,ok\n"
                "recipe,bf16,2048,8,16384,,,,,skipped: needs 9 GiB\n"),
            "torch.json": json.dumps({"kind": "torch", "rows": [
                {"n": 512, "batch": 32, "status": "ok", "step_ms": 50.0, "tokens_per_s": 655360.0, "peak_mib": 4000.0},
                {"n": 2048, "batch": 8, "status": "out of memory: x"}]}),
        })
        d, tj = os.path.dirname(files["softmax/train.csv"]), files["torch.json"]
        out = os.path.join(tmp, "out")
        ns = argparse.Namespace(torch=tj, tarn=["base-softmax=" + d, "base-delta=" + os.path.join(tmp, "none")],
                                out_dir=out, commit="abcdef0123456789", date="2026-01-02", quiet=True, table=None)
        report(ns)
        with open(os.path.join(out, "step-perf-2026-01-02-abcdef012345.json")) as f:
            doc = json.load(f)
        rows = {(r["system"], r["n"]): r for r in doc["rows"]}
        assert doc["missing"] == ["base-delta"], doc["missing"]
        r = rows[("tarn base-softmax", 512)]
        assert abs(r["tokens_per_s_vs_torch"] - 0.5) < 1e-12, r
        assert abs(r["peak_vs_torch"] - 0.5) < 1e-12, r
        assert "tokens_per_s_vs_torch" not in rows[("tarn base-softmax", 2048)], "no ratio to a failed row"
        assert rows[("tarn base-softmax", 2048)]["status"].startswith("skipped"), rows
        assert [r["system"] for r in doc["rows"]][:2] == ["pytorch-bart-sdpa-bf16", "tarn base-softmax"], doc["rows"]
        md = open(os.path.join(out, "step_perf_table.md")).read()
        assert "| 512 | tarn base-softmax | 32 | 100.0 | 327,680 | 0.50 | 2,000 | 0.50 | ok |" in md, md
        assert "| 2048 | pytorch-bart-sdpa-bf16 | 8 |" in md, md
        # Without torch's file the tarn rows still come out, with no ratios.
        ns.torch = os.path.join(tmp, "absent.json")
        report(ns)
        with open(os.path.join(out, "step-perf-2026-01-02-abcdef012345.json")) as f:
            doc = json.load(f)
        assert doc["torch"] == "unavailable" and all("tokens_per_s_vs_torch" not in r for r in doc["rows"]), doc
    print("gpu_step_perf selftest: ok")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--ns", default="512,2048")
    m.add_argument("--tokens", type=int, default=16384)
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--vocab", type=int, default=BASE["vocab"])
    m.add_argument("--deadline", type=float, default=0)
    r = sub.add_parser("report")
    r.add_argument("--torch")
    r.add_argument("--tarn", action="append", default=[], help="NAME=DIR of a tarn bench train --out DIR")
    r.add_argument("--out-dir", required=True)
    r.add_argument("--commit", default="unknown")
    r.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    r.add_argument("--table", help="where the table goes (default: OUT_DIR/step_perf_table.md)")
    r.add_argument("--quiet", action="store_true")
    sub.add_parser("selftest")
    args = p.parse_args()
    return {"measure": measure, "report": report, "selftest": selftest}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
