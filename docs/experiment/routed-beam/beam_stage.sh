#!/bin/bash
# beam_stage.sh SEED VARIANT...: small-recall on the short reverse task (1,200 steps, 512-token
# batches, the long runs' position table of 1,024), then from it the long reverse's first stage
# of tools/experiment.sh's curriculum (sources of 64 words, 300 steps, 2,048-token batches) with
# each VARIANT's routed layers: small-flat2, small-tree2 or small-tree2-b8 (this folder's
# recipes). One thread a run; outputs under work/beam.
set -u
cd "$(dirname "$0")/../../.."
seed=$1; shift
T=${TARN:-build/cpu/tools/tarn}
here=docs/experiment/routed-beam out=work/beam
pairs() { echo "--set data.kind=pairs --set data.train=$1/train.tsv --set data.valid=$1/valid.tsv --set data.test=$1/test.tsv --set data.tokenizer.model=work/wordnet/spm8000.model"; }
common="--set training.max_time_minutes=0 --set validation.every_steps=100 --set validation.max_batches=20
  --set checkpoints.every_steps=100 --set training.device=cpu --set training.threads=1 --set training.seed=$seed"
short=$out/short/seed$seed
mkdir -p "$short"
if [ ! -s "$short/test.txt" ]; then
  # shellcheck disable=SC2046,SC2086
  $T train recipes/small-recall.yaml $common --set training.max_steps=1200 $(pairs work/tasks/reverse) \
    --set model.max_positions=1024 --set training.tokens_per_batch=512 --set checkpoints.dir=$short --restart \
    > "$short.log" 2>&1 || { echo "failed: $short"; exit 1; }
  $T eval --checkpoint "$short" --data work/tasks/reverse/test.tsv > "$short/test.txt" 2>> "$short.log"
fi
for v in "$@"; do
  dir=$out/w64/$v/seed$seed data=work/tasks/long-reverse/w64
  mkdir -p "$dir"
  [ -s "$dir/test.txt" ] && continue
  # shellcheck disable=SC2046,SC2086
  $T train "$here/$v.yaml" $common --set training.max_steps=300 $(pairs $data) --set model.max_positions=1024 \
    --set data.max_source_len=1024 --set data.max_target_len=1024 --set training.tokens_per_batch=2048 \
    --set model.init_from=$short --set checkpoints.dir=$dir --restart > "$dir.log" 2>&1 || { echo "failed: $dir"; exit 1; }
  $T eval --checkpoint "$dir" --data $data/test.tsv > "$dir/test.txt" 2>> "$dir.log"
  echo "$(date +%T) done $dir: $(grep '"valid"' "$dir/metrics.jsonl" | tail -1 | cut -c1-80)"
done
