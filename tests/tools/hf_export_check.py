#!/usr/bin/env python3
"""One tarn export through HuggingFace transformers (tests/tools/hf_export_test.sh runs it per
attention setting):
- a softmax-only export is plain `bart`: BartForConditionalGeneration and AutoModelForSeq2SeqLM
  load it without remote code;
- any other is `tarn_bart`: BartForConditionalGeneration.from_pretrained must refuse it (naming
  trust_remote_code), as must AutoModelForSeq2SeqLM without trust_remote_code, and
  AutoModelForSeq2SeqLM with trust_remote_code=True must load modeling_tarn_bart.py from it;
- the loaded model's NLL over PAIRS (source<TAB>target, cut as tarn cuts them) must be tarn
  eval's within --rtol, and greedy generate() over SOURCES must print tarn generate's lines.

  hf_export_check.py EXPORT PAIRS TARN_NLL SOURCES TARN_GENERATED [--rtol 1e-5]
"""
import argparse
import json
import math
import os
import sys
import warnings


def fail(msg):
    print(f"[hf_export_check] FAIL: {msg}")
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("pairs")
    ap.add_argument("tarn_nll", type=float)
    ap.add_argument("sources")
    ap.add_argument("generated")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args()

    import sentencepiece
    import torch
    import transformers
    from transformers import AutoModelForSeq2SeqLM, BartForConditionalGeneration
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    with open(os.path.join(a.export, "config.json")) as f:
        config = json.load(f)
    t = config["tarn"]
    kinds = set()
    for stack in ("encoder_self_attention", "decoder_self_attention", "cross_attention"):
        s = t[stack]
        kinds |= {e["kind"] for e in s["layers"]} if s.get("layers") else {s["kind"]}
    softmax = kinds == {"softmax"}
    has_code = os.path.exists(os.path.join(a.export, "modeling_tarn_bart.py"))
    if softmax:
        if config["model_type"] != "bart" or "auto_map" in config or has_code:
            fail(f"softmax-only export: model_type {config['model_type']}, auto_map or modeling file present")
        model = AutoModelForSeq2SeqLM.from_pretrained(a.export)
        if type(model) is not BartForConditionalGeneration:
            fail(f"softmax-only export loads as {type(model).__name__}")
    else:
        if config["model_type"] != "tarn_bart" or not has_code:
            fail(f"{sorted(kinds)} export: model_type {config['model_type']}, modeling file present: {has_code}")
        for what, load in (("BartForConditionalGeneration", lambda: BartForConditionalGeneration.from_pretrained(a.export)),
                           ("AutoModelForSeq2SeqLM without trust_remote_code",
                            lambda: AutoModelForSeq2SeqLM.from_pretrained(a.export, trust_remote_code=False))):
            try:
                load()
            except (ValueError, OSError) as e:
                if "trust_remote_code" not in str(e):
                    fail(f"{what} refused, but its message does not name trust_remote_code: {e}")
            else:
                fail(f"{what} loaded a {sorted(kinds)} export (it would run softmax attention)")
        model = AutoModelForSeq2SeqLM.from_pretrained(a.export, trust_remote_code=True)
        if type(model).__name__ != "TarnBartForConditionalGeneration":
            fail(f"trust_remote_code=True loads {type(model).__name__}")
    model.eval()

    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(a.export, t["tokenizer"]))
    eos = config["eos_token_id"]
    max_src, max_tgt = t["max_source_len"], t["max_target_len"]
    total, tokens = 0.0, 0
    with torch.no_grad():
        with open(a.pairs, encoding="utf-8") as f:
            for line in f:
                source, target = line.rstrip("\n").split("\t")
                src = sp.encode(source)[: max_src - 1] + [eos]
                tgt = sp.encode(target)[: max_tgt - 1] + [eos]
                out = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([[eos] + tgt[:-1]]))
                logp = torch.log_softmax(out.logits[0].double(), -1)
                total -= logp[torch.arange(len(tgt)), torch.tensor(tgt)].sum().item()
                tokens += len(tgt)
        nll = total / tokens
        rel = abs(nll - a.tarn_nll) / a.tarn_nll
        if rel > a.rtol:
            fail(f"NLL {nll:.7f} in transformers, tarn eval's {a.tarn_nll:.7f} (relative {rel:.2e} > {a.rtol:g})")
        print(f"[hf_export_check] {sorted(kinds)}: NLL {nll:.7f}, tarn {a.tarn_nll:.7f}, relative {rel:.1e}, "
              f"ppl {math.exp(nll):.4f}")

        with open(a.sources, encoding="utf-8") as f:
            sources = [l.rstrip("\n") for l in f]
        with open(a.generated, encoding="utf-8") as f:
            expected = [l.rstrip("\n") for l in f]
        if len(sources) != len(expected):
            fail(f"{len(sources)} sources, {len(expected)} lines from tarn generate")
        nonempty, max_step = 0, 0.0
        for source, want in zip(sources, expected):
            ids = sp.encode(source)[: max_src - 1] + [eos]
            out = model.generate(torch.tensor([ids]), num_beams=1, do_sample=False, max_new_tokens=128,
                                 forced_eos_token_id=None, forced_bos_token_id=None, min_length=0,
                                 no_repeat_ngram_size=0, decoder_start_token_id=config["decoder_start_token_id"],
                                 eos_token_id=eos, pad_token_id=config["pad_token_id"], use_cache=True,
                                 output_logits=True, return_dict_in_generate=True)
            seq = out.sequences
            # The cache against the whole sequence: each step's logits as the teacher-forced
            # forward's (greedy outputs alone would miss a cache that is off but not by enough
            # to move an argmax).
            steps = torch.cat(out.logits, 0).double()
            full = model(input_ids=torch.tensor([ids]), decoder_input_ids=seq[:, :-1]).logits[0].double()
            worst = (steps - full).abs().max().item() / (1.0 + full.abs().max().item())
            if worst > 1e-5:
                fail(f"generate() on {source!r}: cached decoding's logits differ from the whole-sequence "
                     f"forward's by {worst:.2e} (relative to the largest)")
            max_step = max(max_step, worst)
            got = [i for i in seq[0].tolist()[1:] if i not in (eos, config["pad_token_id"])]
            text = sp.decode(got)
            if text != want:
                fail(f"generate() on {source!r}: {text!r}, tarn generate: {want!r}")
            nonempty += bool(got)
        # All sources as one right-padded batch: padded keys must change nothing.
        ids = [sp.encode(x)[: max_src - 1] + [eos] for x in sources]
        width = max(map(len, ids))
        pad = config["pad_token_id"]
        batch = torch.tensor([i + [pad] * (width - len(i)) for i in ids])
        out = model.generate(batch, attention_mask=(batch != pad).long(), num_beams=1, do_sample=False,
                             max_new_tokens=128, forced_eos_token_id=None, forced_bos_token_id=None, min_length=0,
                             no_repeat_ngram_size=0, decoder_start_token_id=config["decoder_start_token_id"],
                             eos_token_id=eos, pad_token_id=pad, use_cache=True)
        for source, want, row in zip(sources, expected, out.tolist()):
            text = sp.decode([i for i in row[1:] if i not in (eos, pad)])
            if text != want:
                fail(f"generate() on a padded batch, {source!r}: {text!r}, tarn generate: {want!r}")
        print(f"[hf_export_check] generate(): {len(sources)} lines as tarn's, alone and as one padded batch ({nonempty} not empty); "
              f"cached steps' logits within {max_step:.1e} of the whole forward's")


if __name__ == "__main__":
    main()
