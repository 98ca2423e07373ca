#!/usr/bin/env bash
# The tarn command line against bad flags and bad recipe files (ctest: cli_bad_inputs): each
# must end at once with exit status 2 and a message naming what was wrong, before any loading.
#   bad_inputs.sh <tarn> <recipe>
tag=cli
expect_seconds=20  # refusals come before any loading
source "$(dirname "$0")/common.sh"
mkfifo "$work/recipe.fifo"
expect "is not a regular file" "$tarn" config "$work/recipe.fifo"
expect "is not a regular file" "$tarn" train "$work/recipe.fifo"
expect "is not a regular file" "$tarn" config /dev/zero
expect "--restart takes no value (got --restart=false)" "$tarn" train "$recipe" --restart=false
expect "--restart takes no value (got --restart=yes)" "$tarn" train "$recipe" --restart=yes
expect "--beam: 4294967297 is out of range: it must be from 1 to 64" "$tarn" generate --checkpoint "$work/none" --beam 4294967297
expect "--beam: 100000 is out of range" "$tarn" denoise --checkpoint "$work/none" --data x --beam 100000
expect "--max-batches: -1 is out of range" "$tarn" eval --checkpoint "$work/none" --data x --max-batches -1
expect "--count: -1 is out of range" "$tarn" denoise --checkpoint "$work/none" --data x --count -1
expect "--tokens-per-batch: 99999999999999999999 is out of range" \
  "$tarn" eval --checkpoint "$work/none" --data x --tokens-per-batch 99999999999999999999
expect "--max-length: 0 is out of range" "$tarn" generate --checkpoint "$work/none" --max-length 0
expect "--no-repeat-ngram: -1 is out of range" "$tarn" denoise --checkpoint "$work/none" --data x --no-repeat-ngram -1
expect 'training.precision: expected one of f32, bf16, got "fp16"' "$tarn" config "$recipe" --set training.precision=fp16
expect "training.threads: expected an integer in [0, 1024], got 100000" "$tarn" config "$recipe" --set training.threads=100000
expect "model.encoder_layers: this model and its training state need at least" \
  "$tarn" config "$recipe" --set model.encoder_layers=1000000000
# Every size that scales a buffer is counted (issue 56): the delta rule's convolution taps, by
# config and by train (refused before the tokenizer or any run folder), and FAVOR+'s features.
taps=(--set model.attention.decoder_self.kind=delta --set model.attention.decoder_self.conv_size=1000000000000)
expect "model.attention.decoder_self.conv_size: this model and its training state need at least" \
  "$tarn" config "$recipe" "${taps[@]}"
echo "the cat sat" >"$work/train.txt"
expect "model.attention.decoder_self.conv_size: this model and its training state need at least" \
  "$tarn" train "$recipe" "${taps[@]}" --set data.train="$work/train.txt" --set data.valid=\"\" \
  --set data.tokenizer.train.model_prefix="$work/spm" --set checkpoints.dir="$work/run"
[ ! -e "$work/run" ] && [ ! -e "$work/spm.model" ] || fail "train: conv_size 10^12 left a run folder or a tokenizer"
expect "model.attention.cross.favor_features: this model and its training state need at least" \
  "$tarn" config "$recipe" --set model.attention.cross.feature_map=favor --set model.attention.cross.favor_features=2147483647
expect "is not a regular file" "$tarn" train /dev/urandom
# tarn import (issue 55) on copies of the HuggingFace fixture, each damaged one way.
hf="$(dirname "$0")/../fixtures/hf_bart_tiny/hf"
bad_hf() { rm -rf "$work/hf"; cp -r "$hf" "$work/hf"; }
bad_hf; sed -i 's/"scale_embedding": false/"scale_embedding": false, "normalize_before": true/' "$work/hf/config.json"
expect "config.json: normalize_before = true: tarn's BART is post-LayerNorm" "$tarn" import "$work/hf" --out "$work/imp"
bad_hf; rm "$work/hf/model.safetensors"
expect "model.safetensors: missing" "$tarn" import "$work/hf" --out "$work/imp"
bad_hf; sed -i 's/"type": "BPE"/"type": "WordPiece"/' "$work/hf/tokenizer.json"
expect 'tokenizer.json: model.type is "WordPiece"' "$tarn" import "$work/hf" --out "$work/imp"
bad_hf; head -c 4000 "$hf/model.safetensors" >"$work/hf/model.safetensors"
expect "model.safetensors: file is truncated" "$tarn" import "$work/hf" --out "$work/imp"
finish "all bad inputs refused with exit 2"
