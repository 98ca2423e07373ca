#!/usr/bin/env bash
# HuggingFace -> tarn -> HuggingFace (issue 55; ctest hf_import_roundtrip): tarn import the
# fixture tests/fixtures/hf_bart_tiny (made by transformers), tarn export it, and load the export
# in transformers with its own tokenizer files. Required: BartForConditionalGeneration loads it
# strictly, its mean NLL over pairs.tsv is the fixture's within 1e-5 relative, BartTokenizerFast
# from the exported tokenizer.json and vocab.json + merges.txt gives the fixture's ids on every
# string, and greedy generate() gives the fixture's outputs token for token.
#   hf_import_roundtrip.sh <repo root> <tarn binary> <python with torch and transformers>
set -euo pipefail
root=$1 tarn=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fixture=$root/tests/fixtures/hf_bart_tiny
"$python" -c 'import torch, transformers' 2>/dev/null ||
  { echo "[hf_import_roundtrip] FAIL: $python lacks torch or transformers: run tools/setup.sh (it builds build/pyhf)"; exit 1; }

"$tarn" import "$fixture/hf" --out "$work/bart" 2>"$work/log" || { cat "$work/log"; exit 1; }
"$tarn" export --checkpoint "$work/bart" --out "$work/export" 2>>"$work/log" || { cat "$work/log"; exit 1; }

"$python" - "$work/export" "$fixture" <<'PY'
import json, sys
import torch
from transformers import BartForConditionalGeneration, BartTokenizer, BartTokenizerFast
from transformers.models.bart.modeling_bart import shift_tokens_right

export, fixture = sys.argv[1], sys.argv[2]
expected = json.load(open(f"{fixture}/expected.json", encoding="utf-8"))
failures = []

model, info = BartForConditionalGeneration.from_pretrained(export, output_loading_info=True)
model.eval()
if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
    failures.append(f"loading info {info}")

fast = BartTokenizerFast.from_pretrained(export)  # tokenizer.json
slow = BartTokenizer.from_pretrained(export)      # vocab.json + merges.txt, Python's GPT-2 BPE
for name, tok in (("tokenizer.json", fast), ("vocab.json + merges.txt", slow)):
    same = sum(tok(s, add_special_tokens=False)["input_ids"] == ids
               for s, ids in zip(expected["strings"], expected["ids"]))
    print(f"[hf_import_roundtrip] {name}: {same}/{len(expected['ids'])} strings give the fixture's ids")
    if same != len(expected["ids"]):
        failures.append(f"{name}: {len(expected['ids']) - same} strings differ")

pairs = [l.rstrip("\n").split("\t") for l in open(f"{fixture}/pairs.tsv", encoding="utf-8")]
batch = fast([s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
labels = batch["labels"].masked_fill(batch["labels"] == model.config.pad_token_id, -100)
dec = shift_tokens_right(batch["labels"], model.config.pad_token_id, model.config.decoder_start_token_id)
with torch.no_grad():
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=dec).logits
nll = float(torch.nn.functional.cross_entropy(logits.double().view(-1, logits.size(-1)), labels.view(-1),
                                              ignore_index=-100, reduction="sum")) / int((labels != -100).sum())
want = expected["pairs_mean_nll"]
print(f"[hf_import_roundtrip] mean NLL {nll:.9f}, fixture {want:.9f}")
if abs(nll - want) > 1e-5 * want:
    failures.append(f"NLL {nll} vs {want}")

same = 0
for g in expected["greedy"]:
    enc = fast(g["source"], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, num_beams=1, do_sample=False, max_length=expected["generate_max_length"],
                             min_length=0, no_repeat_ngram_size=0)
    same += out[0].tolist() == g["output_ids"]
print(f"[hf_import_roundtrip] greedy: {same}/{len(expected['greedy'])} outputs identical")
if same != len(expected["greedy"]):
    failures.append("greedy outputs differ")

if failures:
    print("[hf_import_roundtrip] FAIL: " + "; ".join(failures))
    sys.exit(1)
print("[hf_import_roundtrip] the imported and exported model is HuggingFace's")
PY
