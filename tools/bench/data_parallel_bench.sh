#!/usr/bin/env bash
# Data-parallel training speed: one process against mpirun ranks, at a fixed global batch
# (strong scaling) and at a fixed per-rank batch (weak scaling), with the time the gradient
# collectives take. Each configuration trains RECIPE for STEPS steps from scratch; the figure is
# the median of the progress lines' source+target tokens/s (setup, validation and checkpoints
# excluded), and the last column the gradient collective's time per step on rank 0 (its wait
# for the slower rank included).
#   tools/bench/data_parallel_bench.sh [RECIPE] [STEPS]      (defaults: recipes/small-linear.yaml, 60)
#   TARN=build/release/tools/tarn  MPIRUN="mpirun --allow-run-as-root ..."  to override
set -euo pipefail
cd "$(dirname "$0")/../.."
recipe=${1:-recipes/small-linear.yaml}
steps=${2:-60}
tarn=${TARN:-build/release/tools/tarn}
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader,tcp}"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
base_tokens=$("$tarn" config "$recipe" 2>/dev/null | awk '/^ *tokens_per_batch:/ {print $2; exit}')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $recipe, $steps steps; load before: $(cut -d' ' -f1 /proc/loadavg)"
printf '%-34s %8s %8s %12s %10s %14s\n' config ranks threads global_batch tok/s comm_ms/step
n=0
run() {  # name ranks threads tokens_per_batch [extra --set ...]
  local name=$1 ranks=$2 threads=$3 tokens=$4 dir
  shift 4
  n=$((n + 1))
  dir=$out/run$n
  local cmd=("$tarn" train "$recipe" --restart --set training.max_steps="$steps" --set training.max_time_minutes=0
             --set training.threads="$threads" --set training.tokens_per_batch="$tokens"
             --set logging.every_steps=5 --set validation.every_steps=0 --set validation.max_batches=1
             --set checkpoints.every_steps=0 --set checkpoints.dir="$dir" --set logging.color=never "$@")
  if [ "$ranks" -gt 1 ]; then cmd=("${mpirun[@]}" -np "$ranks" "${cmd[@]}"); fi
  OMP_NUM_THREADS=$threads "${cmd[@]}" >"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
  local tps comm
  tps=$(grep '^\[train\] step' "$dir.log" | tail -n +2 | sed 's/.*| \([0-9,]*\) tok\/s.*/\1/' | tr -d , | sort -n |
        awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  comm=$(sed -n 's/^\[dist\] gradient [a-z +-]*: \([0-9.]*\) ms per step.*/\1/p' "$dir.log")
  printf '%-34s %8s %8s %12s %10s %14s\n' "$name" "$ranks" "$threads" "$tokens" "$tps" "${comm:--}"
}
[ -n "${ONLY_OVERLAP:-}" ] && { run "strong: 2 ranks x 1 thread" 2 1 "$base_tokens"
  run "strong: 2 ranks x 1 thread, no overlap" 2 1 "$base_tokens" --set training.overlap_communication=false
  run "strong: 2 ranks x 1 thread" 2 1 "$base_tokens"
  run "strong: 2 ranks x 1 thread, no overlap" 2 1 "$base_tokens" --set training.overlap_communication=false
  exit 0; }
run "1 rank x 2 threads" 1 2 "$base_tokens"
run "strong: 2 ranks x 1 thread" 2 1 "$base_tokens"
run "strong: 2 ranks x 1 thread, no overlap" 2 1 "$base_tokens" --set training.overlap_communication=false
run "strong: 2 ranks x 1 thread, ZeRO-1" 2 1 "$base_tokens" --set training.shard_optimizer=true
run "1 rank x 1 thread" 1 1 "$base_tokens"
run "weak: 2 ranks x 1 thread" 2 1 $((2 * base_tokens))
run "1 rank x 2 threads, 2x batch" 1 2 $((2 * base_tokens))
echo "# load after: $(cut -d' ' -f1 /proc/loadavg)"
