#!/usr/bin/env bash
# An export scored by tools/reference/bart_reference.py (BART and the attention kinds written
# from docs/design.md in NumPy, float64, token by token) must give tarn eval's NLL: for each
# attention setting below, train the tiny recipe on word-salad pairs for a few steps, export,
# score the same pairs with both, and compare within 1e-5 of the NLL (f32 against f64 agree to
# about 1e-7). A difference means docs/design.md does not say what tarn computes, or the export
# does not carry it. The weights are drawn large (init_std 0.3) and moved by a large learning
# rate, so that attention's details move the NLL: with them, Taylor's order one higher moves it
# by 6e-3, the convolution's taps reversed by 3e-3, the encoder's two scans weighed 0.9 : 1 by
# 8e-5 (relative; measured when the test was written).
#   reference_test.sh <repo root> <tarn binary> <python with numpy and sentencepiece>
set -euo pipefail
root=$1
tarn=$2
python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "[reference_test] FAIL: $*"
  exit 1
}

"$python" -c 'import numpy, sentencepiece' 2>/dev/null ||
  fail "$python lacks numpy or sentencepiece: run tools/setup.sh"

# Word salad, source<TAB>its words reversed: short lines (no truncation at the tiny recipe's 64).
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

# name|encoder self|decoder self|cross[|tolerance, relative: 1e-5 unless given]
# FAVOR+ in bidirectional attention: its keys' stabiliser is the max over a (batch, head)
# slice's rows, padded rows included, and reaches the output through the normaliser's eps, so a
# batched score moves with the batch's padding (5.8735-5.8751 for one model at three batch
# sizes, 2026-11-27); the reference scores each example alone. Causal FAVOR+ (unstabilised keys)
# agrees as closely as the other maps.
settings=(
  "softmax|{kind: softmax}|{kind: softmax}|{kind: softmax}"
  "linear|{kind: linear}|{kind: linear, chunk: 16}|{kind: linear}"
  "maps|{kind: linear, feature_map: relu}|{kind: linear, feature_map: hedgehog}|{kind: linear, feature_map: exp}"
  "favor-causal|{kind: softmax}|{kind: linear, feature_map: favor, favor_features: 16}|{kind: linear, feature_map: hedgehog}"
  "favor|{kind: linear, feature_map: favor, favor_features: 32}|{kind: softmax}|{kind: linear, feature_map: favor}|1e-3"
  "delta-taylor|{kind: delta}|{kind: delta}|{kind: linear, feature_map: taylor, taylor_dim: 8}"
  "delta-cross|{kind: delta, conv_size: 2}|{kind: gated}|{kind: delta}"
  "aligned|{kind: delta}|{kind: delta}|{kind: linear, feature_map: taylor, taylor_dim: 8, align_decay: 0.6}"
  "aligned-gate|{kind: delta}|{kind: gated}|{kind: linear, feature_map: taylor, taylor_dim: 8, align_decay: 0.6, align_gate: true}"
  "taylor4|{kind: linear, feature_map: taylor, taylor_order: 4, taylor_dim: 4}|{kind: softmax}|{kind: gated}"
  "hybrid|{kind: hybrid, global: delta, window: 4, chunk: 4}|{kind: hybrid, global: delta, window: 4}|{kind: hybrid, window: 4, feature_map: taylor, taylor_dim: 8}"
  "hybrid-linear|{layers: [softmax, {kind: hybrid, window: 2}]}|{kind: hybrid, global: gated, window: 3}|{layers: [linear, {kind: hybrid, window: 6}]}"
  "routed|{kind: delta}|{kind: gated}|{kind: routed, route_chunk: 2, route_top: 2}"
  "routed-tree|{kind: delta}|{kind: delta}|{kind: routed, route_chunk: 2, route_top: 2, route_root: 2, route_beam: 3}"
)
for s in "${settings[@]}"; do
  IFS='|' read -r name enc dec cross tolerance <<<"$s"
  tolerance=${tolerance:-1e-5}
  run=$work/run-$name
  "$tarn" train "$root/recipes/tiny.yaml" --set data.kind=pairs --set "data.train=$work/train.tsv" \
    --set "data.valid=$work/valid.tsv" \
    --set "model.attention.encoder_self=$enc" --set "model.attention.decoder_self=$dec" \
    --set "model.attention.cross=$cross" --set training.max_steps=6 --set optimizer.lr=0.01 \
    --set model.init_std=0.3 --set training.threads=1 \
    --set "checkpoints.dir=$run" --restart >"$run.log" 2>&1 || { tail -5 "$run.log"; fail "$name: tarn train failed"; }
  "$tarn" export --checkpoint "$run" --out "$run/export" >>"$run.log" 2>&1 || fail "$name: tarn export failed"
  ours=$("$tarn" eval --checkpoint "$run" --data "$work/valid.tsv" 2>>"$run.log" | awk '$1 == "nll" {print $2}')
  theirs=$("$python" "$root/tools/reference/bart_reference.py" "$run/export" "$work/valid.tsv" | awk '$1 == "nll" {print $2}')
  [ -n "$ours" ] && [ -n "$theirs" ] || fail "$name: no NLL (tarn '$ours', reference '$theirs')"
  awk -v a="$ours" -v b="$theirs" -v t="$tolerance" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t * a) }' ||
    fail "$name: tarn eval NLL $ours, the reference's $theirs"
  echo "[reference_test] $name: tarn $ours, reference $theirs"
done
echo "[reference_test] ok"
