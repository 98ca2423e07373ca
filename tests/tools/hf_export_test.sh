#!/usr/bin/env bash
# An export must load right in HuggingFace transformers (docs/design.md section 8, "The export
# format"): for each attention setting of the group below, train the tiny recipe on word-salad
# pairs, export, and run tests/tools/hf_export_check.py on it, which requires
# - a softmax-only export to load as plain BART, any other to be refused by
#   BartForConditionalGeneration (and by AutoModelForSeq2SeqLM without trust_remote_code) and
#   loaded by AutoModelForSeq2SeqLM with trust_remote_code=True (modeling_tarn_bart.py);
# - the NLL over the validation pairs within 1e-5 (relative) of tarn eval's;
# - greedy generate() (through the model's cache) to print tarn generate's lines, each step's
#   logits within 1e-5 (relative to the largest) of the whole-sequence forward's.
# The weights are drawn larger than the recipe's (init_std 0.1) so that attention's details move
# the NLL, and trained 80 steps at lr 3e-3 so that greedy decoding says something (at init_std
# 0.3, lr 1e-2 most settings decode nothing but </s>).
#   hf_export_test.sh <repo root> <tarn binary> <python with torch, transformers, sentencepiece> <group: a or b>
set -euo pipefail
root=$1
tarn=$2
python=$3
group=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "[hf_export_test] FAIL: $*"
  exit 1
}

"$python" -c 'import torch, transformers, sentencepiece' 2>/dev/null ||
  fail "$python lacks torch, transformers or sentencepiece: run tools/setup.sh (it builds build/pyhf)"

# Word salad, source<TAB>its words reversed (tests/tools/reference_test.sh's).
awk 'BEGIN {
  srand(7)
  split("the a of to and in is was for on that with as by at from this which or an be are it his " \
        "one two water light small large house river stone green cold quick tree bird song wind", w, " ")
  for (i = 0; i < 400; i++) {
    n = 3 + int(rand() * 8); s = ""; r = ""
    for (j = 0; j < n; j++) { x = w[1 + int(rand() * 52)]; s = s (j ? " " : "") x; r = x (j ? " " : "") r }
    print s "\t" r
  }
}' >"$work/pairs.tsv"
head -n 360 "$work/pairs.tsv" >"$work/train.tsv"
tail -n 40 "$work/pairs.tsv" >"$work/valid.tsv"
cut -f1 "$work/valid.tsv" | head -n 8 >"$work/sources.txt"

# name|encoder self|decoder self|cross[|tolerance, relative: 1e-5 unless given]
# Bidirectional FAVOR+ within 1e-3: tarn's keys' stabiliser spans a batch's padded rows
# (docs/design.md section 2), transformers scores each pair alone.
case $group in
  a) settings=(
       "softmax|{kind: softmax}|{kind: softmax}|{kind: softmax}"
       "linear|{kind: linear}|{kind: linear, chunk: 16}|{kind: linear}"
       "maps|{kind: linear, feature_map: relu}|{kind: linear, feature_map: hedgehog}|{kind: linear, feature_map: exp}"
       "favor-causal|{kind: softmax}|{kind: linear, feature_map: favor, favor_features: 16}|{kind: linear, feature_map: hedgehog}"
       "favor|{kind: linear, feature_map: favor, favor_features: 32}|{kind: softmax}|{kind: linear, feature_map: favor}|1e-3"
       "taylor4|{kind: linear, feature_map: taylor, taylor_order: 4, taylor_dim: 4}|{kind: softmax}|{kind: gated}"
       "identity|{kind: linear, feature_map: identity}|{kind: softmax}|{kind: linear, feature_map: identity}"
     ) ;;
  b) settings=(
       "delta-taylor|{kind: delta}|{kind: delta}|{kind: linear, feature_map: taylor, taylor_dim: 8}"
       "delta-cross|{kind: delta, conv_size: 2}|{kind: gated}|{kind: delta}"
       "aligned|{kind: gated}|{kind: delta}|{kind: linear, feature_map: taylor, taylor_dim: 8, align_decay: 0.6}"
       "aligned-gate|{kind: delta}|{kind: gated}|{kind: linear, feature_map: taylor, taylor_dim: 8, align_decay: 0.6, align_gate: true}"
       "hybrid|{kind: hybrid, global: delta, window: 4, chunk: 4}|{kind: hybrid, global: delta, window: 4}|{kind: hybrid, window: 4, feature_map: taylor, taylor_dim: 8}"
       "per-layer|{layers: [softmax, {kind: hybrid, window: 2}]}|{kind: hybrid, global: gated, window: 3}|{layers: [linear, {kind: hybrid, window: 6}]}"
       "routed|{kind: delta}|{kind: gated}|{kind: routed, route_chunk: 2, route_top: 2}"
       "recall|{kind: delta}|{kind: delta}|{layers: [{kind: linear, feature_map: taylor, taylor_dim: 8, align_decay: 0.6, align_gate: true}, {kind: routed, route_chunk: 2, route_top: 2, route_root: 2, route_beam: 3}]}"
     ) ;;
  *) fail "group $group: expected a or b" ;;
esac

for s in "${settings[@]}"; do
  IFS='|' read -r name enc dec cross tolerance <<<"$s"
  tolerance=${tolerance:-1e-5}
  run=$work/run-$name
  "$tarn" train "$root/recipes/tiny.yaml" --set data.kind=pairs --set "data.train=$work/train.tsv" \
    --set "data.valid=$work/valid.tsv" \
    --set "model.attention.encoder_self=$enc" --set "model.attention.decoder_self=$dec" \
    --set "model.attention.cross=$cross" --set training.max_steps=80 --set optimizer.lr=3e-3 \
    --set model.init_std=0.1 --set training.threads=1 \
    --set "checkpoints.dir=$run" --restart >"$run.log" 2>&1 || { tail -5 "$run.log"; fail "$name: tarn train failed"; }
  "$tarn" export --checkpoint "$run" --out "$work/export-$name" >>"$run.log" 2>&1 || fail "$name: tarn export failed"
  nll=$("$tarn" eval --checkpoint "$run" --data "$work/valid.tsv" 2>>"$run.log" | awk '$1 == "nll" {print $2}')
  [ -n "$nll" ] || fail "$name: tarn eval printed no NLL"
  "$tarn" generate --checkpoint "$run" <"$work/sources.txt" >"$work/generated-$name.txt" 2>>"$run.log" ||
    fail "$name: tarn generate failed"
  HF_HOME=$work/hf-$name HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$python" "$root/tests/tools/hf_export_check.py" "$work/export-$name" "$work/valid.tsv" "$nll" \
    "$work/sources.txt" "$work/generated-$name.txt" --rtol "$tolerance" >"$work/check-$name.txt" 2>&1 ||
    { cat "$work/check-$name.txt"; fail "$name"; }
  sed "s/^\[hf_export_check\]/[hf_export_test] $name:/" "$work/check-$name.txt"
done
echo "[hf_export_test] ok"
