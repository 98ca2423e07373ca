#!/usr/bin/env bash
# Step time and peak memory of training, on one rank and on two, for one or more tarn builds
# (the arena's before/after comparison in docs/measurements.md). Each run trains RECIPE from scratch for STEPS
# steps, logging every step; the step time is the median of the steps' wall-clock deltas in
# metrics.jsonl (step 1, which warms the allocator up, left out). Peak memory, as rank 0's
# validation row at the end has it (the training steps and one validation batch): the
# allocator's live peak and the resident set's peak; and the whole process's maximum resident
# set over the ranks (GNU time), the final test evaluation included. Runs of
# the builds alternate, REPEATS times, so that a shared machine's load falls on each alike.
#   tools/bench/step_memory_bench.sh RECIPE STEPS REPEATS NAME=TARN [NAME=TARN ...]
#   e.g. tools/bench/step_memory_bench.sh recipes/small-linear.yaml 12 3 before=/tmp/tarn_main after=build/release/tools/tarn
# Relative data paths in RECIPE are read from the current directory. MPIRUN overrides the launcher;
# SET="key=value ..." adds recipe overrides to every run.
set -euo pipefail
recipe=$1 steps=$2 repeats=$3
shift 3
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader,tcp}"
overrides=()
for kv in ${SET:-}; do overrides+=(--set "$kv"); done
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_WAIT_POLICY=PASSIVE
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $recipe ${SET:-}, $steps steps, $repeats repeats; load before: $(cut -d' ' -f1 /proc/loadavg)"
printf '%-8s %5s %6s %4s %10s %10s %10s %16s\n' build ranks zero rep step_s live_MiB rss_MiB process_rss_MiB
for rep in $(seq "$repeats"); do
  for ranks in 1 2; do
    for zero in false true; do
      [ "$ranks" = 1 ] && [ "$zero" = true ] && continue
      for pair in "$@"; do
        name=${pair%%=*} tarn=${pair#*=}
        dir=$out/$name-$ranks-$zero-$rep
        threads=$((2 / ranks))
        cmd=(/usr/bin/time -f "rss_kb %M" "$tarn" train "$recipe" --restart --set training.max_steps="$steps"
             --set training.max_time_minutes=0 --set training.threads="$threads" --set logging.every_steps=1
             --set validation.every_steps=0 --set validation.max_batches=1 --set checkpoints.every_steps=0
             --set checkpoints.dir="$dir" --set logging.color=never --set training.shard_optimizer="$zero" "${overrides[@]}")
        if [ "$ranks" -gt 1 ]; then cmd=("${mpirun[@]}" -np "$ranks" "${cmd[@]}"); fi
        OMP_NUM_THREADS=$threads "${cmd[@]}" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
        step=$(grep '"kind":"train"' "$dir/metrics.jsonl" | sed 's/.*"elapsed_s":\([0-9.e+-]*\).*/\1/' |
               awk 'NR > 1 {print $1 - prev} {prev = $1}' | tail -n +2 | median)
        last=$(grep '"kind":"valid"' "$dir/metrics.jsonl" | tail -1)
        live=$(sed 's/.*"memory_live_peak_bytes":\([0-9]*\).*/\1/' <<<"$last")
        train_rss=$(sed 's/.*"rss_peak_bytes":\([0-9]*\).*/\1/' <<<"$last")
        rss=$(sed -n 's/^rss_kb \([0-9]*\)$/\1/p' "$dir.log" | sort -n | tail -1)
        printf '%-8s %5s %6s %4s %10.3f %10s %10s %16s\n' "$name" "$ranks" "$zero" "$rep" "$step" "$((live >> 20))" \
          "$((train_rss >> 20))" "$((rss / 1024))"
      done
    done
  done
done
echo "# load after: $(cut -d' ' -f1 /proc/loadavg)"
