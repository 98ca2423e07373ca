#!/usr/bin/env bash
# The BART experiment, reproducible: softmax against linear attention in speed, memory and
# perplexity. Runs the benches (tarn bench attention | train | decode), trains eight small settings
# (softmax, linear encoder, linear, linear with FAVOR+, delta, gated, delta-taylor, hybrid) with
# three seeds each on the same token budget, and long-sequence runs of softmax, linear, delta and
# hybrid (packed 2,048-token examples), then regenerates docs/experiment.md and its plots from
# what it measured.
#
#   tools/experiment.sh [--quick | --full | --smoke] [--out DIR] [--doc FILE]
#
# --quick (default) took about 30 minutes on 2 cores with 8 quality runs; with 24 expect about 65
# (not yet timed); --full takes several hours; --smoke checks the whole pipeline in a few minutes
# (its figures mean nothing: write --doc elsewhere). Run it on an otherwise idle machine: every
# figure is a timing. Needs the build of README's set-up command (build/release/tools/tarn) and
# python3-matplotlib (tools/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=quick
out=work/experiment
doc=docs/experiment.md
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --smoke) mode=smoke ;;
    --out) out="$2"; shift ;;
    --doc) doc="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "experiment.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

tarn=${TARN:-build/release/tools/tarn}
[ -x "$tarn" ] || { echo "experiment.sh: $tarn is missing: run tools/quickstart.sh (it sets up and builds tarn) first" >&2; exit 2; }
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
  { echo "experiment.sh: python3-matplotlib is missing: run tools/setup.sh" >&2; exit 2; }

# Per mode: attention lengths and the predicted seconds per run above which a length is skipped;
# training-bench lengths and steps; decoded positions; steps and validation interval (with its
# batches) of the quality runs and of the long-sequence runs.
case "$mode" in
  quick)
    attention_n=128,256,512,1024,2048,4096,8192,16384,32768,65536; attention_max_s=10
    train_n=128,512,2048; train_steps=2
    positions=10000
    quality_steps=100; quality_every=25; quality_batches=10
    long_steps=30; long_every=10; long_batches=5 ;;
  full)
    attention_n=128,256,512,1024,2048,4096,8192,16384,32768,65536; attention_max_s=300
    train_n=128,256,512,1024,2048,4096; train_steps=3
    positions=10000
    quality_steps=600; quality_every=50; quality_batches=20
    long_steps=300; long_every=25; long_batches=10 ;;
  smoke)
    attention_n=64,128; attention_max_s=1
    train_n=32,64; train_steps=1
    positions=50
    quality_steps=2; quality_every=1; quality_batches=1
    long_steps=2; long_every=1; long_batches=1 ;;
esac

rm -rf "$out"
mkdir -p "$out"
echo "$mode" > "$out/mode.txt"
commands="$out/commands.txt"
echo "# tarn $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)')$(git diff --quiet HEAD 2>/dev/null || echo ' with local changes'), $mode mode" > "$commands"
started=$(date +%s)
exec 3>&2  # progress lines reach the terminal even from commands whose output goes to a log

# Runs a command and records it in commands.txt, as it ran.
run() {
  echo "$*" >> "$commands"
  echo "[experiment] $(( ($(date +%s) - started) / 60 )) min: $*" >&3
  "$@"
}

[ -f work/wordnet/train.txt ] || run "$tarn" prepare-corpus work/wordnet

# shellcheck disable=SC2046  # the smoke mode's repetitions: one, at once
run "$tarn" bench attention --n "$attention_n" --max-seconds "$attention_max_s" \
  $([ "$mode" = smoke ] && echo --reps 1 --min-time 0) --out "$out"
run "$tarn" bench train recipes/small-linear.yaml --n "$train_n" --steps "$train_steps" --out "$out"
run "$tarn" bench decode recipes/small-linear.yaml --positions "$positions" --out "$out"

# The quality settings: same data, token budget (steps x training.tokens_per_batch) and
# hyperparameters; only the attention differs.
favor="--set model.attention.encoder_self.feature_map=favor --set model.attention.decoder_self.feature_map=favor"
favor="$favor --set model.attention.cross.feature_map=favor"
budget="--set training.max_steps=$quality_steps --set training.max_time_minutes=0"
budget="$budget --set validation.every_steps=$quality_every --set validation.max_batches=$quality_batches"
budget="$budget --set checkpoints.every_steps=$quality_steps"
train_setting() {  # folder, seed, recipe, extra --set flags...
  local dir="$1" seed="$2" recipe="$3"
  shift 3
  # shellcheck disable=SC2086  # $budget holds several flags
  run "$tarn" train "$recipe" $budget --set training.seed="$seed" --set checkpoints.dir="$dir" "$@" --restart \
    > "$dir.log" 2>&1 || { echo "experiment.sh: training failed, see $dir.log" >&2; exit 1; }
  run "$tarn" eval --checkpoint "$dir" --data work/wordnet/test.txt > "$dir/test.txt"
}
for seed in 1 2 3; do
  for setting in small-softmax small-linear-encoder small-linear small-linear-favor small-delta small-gated \
    small-delta-taylor small-hybrid; do
    dir="$out/quality/$setting/seed$seed"
    mkdir -p "$dir"
    case "$setting" in
      small-linear-favor) train_setting "$dir" "$seed" recipes/small-linear.yaml $favor ;;
      *) train_setting "$dir" "$seed" "recipes/$setting.yaml" ;;
    esac
  done
done

# Long sequences: consecutive glosses packed into 2,048-token examples, two per batch.
long="--set data.pack_tokens=2048 --set data.max_source_len=2048 --set data.max_target_len=2048"
long="$long --set model.max_positions=2048 --set training.tokens_per_batch=4096"
budget="--set training.max_steps=$long_steps --set training.max_time_minutes=0"
budget="$budget --set validation.every_steps=$long_every --set validation.max_batches=$long_batches"
budget="$budget --set checkpoints.every_steps=$long_steps"
for attention in softmax linear delta hybrid; do
  dir="$out/long/long-$attention/seed1"
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  train_setting "$dir" 1 "recipes/small-$attention.yaml" $long
done

run /usr/bin/python3 tools/experiment/report.py --in "$out" --doc "$doc"
echo "[experiment] done in $(( ($(date +%s) - started) / 60 )) min: $doc" >&2
