#!/bin/bash
# long_stage.sh TASK RECIPE SETTING SEED OUT: chain.sh's last stage (600 steps on the 512-word
# sources, 2,048-token batches, 1 thread) from small-recall's 256-word stage of the same seed
# (work/exp-mixed), with another recipe's cross-attention: the tree of landmarks against the
# flat read at the same chunk and top.
set -u
cd /work/main
task=$1 recipe=$2 setting=$3 seed=$4 out=$5
tarn=build/cpu/tools/tarn
from=work/exp-mixed/curriculum/long-$task-w256/small-mixed/seed$seed
dir="$out/tasks/long-$task/$setting/seed$seed"; data="work/tasks/long-$task"
mkdir -p "$dir"
if [ ! -s "$dir/test.txt" ]; then
  $tarn train "$recipe" --set training.max_steps=600 --set training.max_time_minutes=0 --set validation.every_steps=100 \
    --set validation.max_batches=20 --set checkpoints.every_steps=100 --set training.device=cpu --set training.threads=1 \
    --set training.seed=$seed --set checkpoints.dir=$dir --set data.kind=pairs --set data.train=$data/train.tsv \
    --set data.valid=$data/valid.tsv --set data.test=$data/test.tsv --set data.tokenizer.model=work/wordnet/spm8000.model \
    --set model.max_positions=1024 --set data.max_source_len=1024 --set data.max_target_len=1024 \
    --set training.tokens_per_batch=2048 --set model.init_from=$from --restart > "$dir.log" 2>&1 || { echo "failed: $dir"; exit 1; }
  $tarn eval --checkpoint "$dir" --data "$data/test.tsv" > "$dir/test.txt" 2>> "$dir.log"
fi
echo "$(date +%T) done $dir: $(grep '"valid"' $dir/metrics.jsonl | tail -1 | cut -c1-70)"
