#!/usr/bin/env bash
# The BART experiment, reproducible: softmax against linear attention in speed, memory and
# perplexity. Runs the benches (tarn bench attention | train | decode; the training and decoding
# benches time small-hybrid beside softmax and linear), trains fourteen small settings
# (softmax, linear encoder, linear, linear with FAVOR+, delta and gated everywhere, delta-taylor,
# delta, gated, hybrid, interleaved, align-gate, routed, recall) with three seeds each on the same
# token budget, and long-sequence runs of softmax, linear, delta everywhere and hybrid (packed
# 2,048-token examples), and (asked for by --only tasks) seq2seq tasks whose alignment is not the
# diagonal (softmax, delta, align-gate, routed and recall on each; issue 53), and (asked for by
# --only linearize) a softmax teacher linearized into three variants (tools/experiment/linearize.sh;
# issue 55), then regenerates docs/experiment.md and its plots from what it measured.
#
#   tools/experiment.sh [--quick | --full | --smoke] [--out DIR] [--doc FILE] [--jobs J]
#                       [--resume | --restart] [--from DIR2] [--only PHASES] [--device DEVICE]
#                       [--settings LIST] [--seeds LIST] [--tasks LIST] [--task-steps N]
#
# --quick (default) takes about 80 minutes on 2 cores; --full takes over 10 hours there (42 quality
# runs of 600 steps, 4 long runs of 300 steps, benches up to N=65,536): split it with --resume;
# --smoke checks the whole pipeline in a few minutes (its figures mean nothing: write --doc
# elsewhere). Run it on an otherwise idle machine: every bench figure is a timing.
#   --jobs J       train J quality or long-sequence runs at a time, each on nproc/J threads
#                  (default 1). Perplexity at a step does not depend on it; the runs' times do,
#                  so the report then says their times are not speeds.
#   --resume       keep DIR and what is finished in it: a bench whose JSON exists and a run whose
#                  test perplexity exists are not run again; an unfinished run goes on from its
#                  newest checkpoint (one is written at every validation), as `tarn train` resumes.
#                  The mode must be the one DIR was started in. Stop with Ctrl-C, go on later.
#                  --only report always keeps DIR, as --resume does (it only reads DIR).
#   --restart      delete DIR and start it over. Without --resume or --restart, a DIR that holds
#                  an experiment (its mode.txt) is refused: a new phase into an old DIR must not
#                  delete the runs already there.
#   --from DIR2    start DIR with the benches and runs DIR2 holds (what is in DIR already wins;
#                  the notes, commands.txt and each phase's device.txt and jobs.txt, keep both)
#                  and go on as --resume: DIR2 may be docs/experiment/data, the inputs of the last
#                  report, so that the experiment grows across machines and sessions.
#   --only PHASES  comma-separated: bench, quality, long, tasks, linearize, report (default: all
#                  but tasks, whose 90 runs take a day or more on 2 cores, and linearize, about 2.5
#                  hours there in full mode with 3 seeds and three 1,100-step runs: ask for them
#                  by name). The report shows whatever DIR holds, and copies what it read (the
#                  benches' CSV and JSON, each run's metrics.jsonl and test.txt; no checkpoints
#                  or logs) to <DOC's folder>/experiment/data beside its plots.
#   --settings L   comma-separated settings to train, in that order (quality: default all fourteen,
#                  as listed above; tasks: those of its five named here); --seeds L:
#                  comma-separated seeds, each 1, 2 or 3 (default: 1,2,3), seed by seed. With
#                  --resume they fill in a DIR in the order wanted.
#   --tasks L      the tasks phase's tasks (default: all six): sequence-to-sequence pairs whose
#                  alignment is not the diagonal, written from the corpus by
#                  tools/experiment/tasks.py (reverse, offset, skip and long-* on sources of 512
#                  words or more), each trained with small-softmax, small-delta, small-align-gate,
#                  small-routed and small-recall (issue 53), seeds as --seeds. --task-steps N: their steps (default: quick 300,
#                  full 1,200, the budget of issue 53's table). A long task is trained through a
#                  length curriculum: its short task (N steps), sources of 64, 128 and 256 words
#                  (full: 300 steps each), then the long sources (full: 600 steps).
#   --device D     train and evaluate the quality and long-sequence runs on D (training.device:
#                  cpu, the default, or cuda, cuda:N): the same recipes and token budget, so the
#                  same perplexities up to f32 rounding order; the report names the device. The
#                  benches stay on the CPU. Give a GPU --jobs 1: processes time-slice it, and 8
#                  at a time on an H100 were slower in all than one at a time.
# Needs the build of README's set-up command (build/release/tools/tarn, or $TARN) and
# python3-matplotlib (tools/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=quick
out=work/experiment
doc=docs/experiment.md
jobs=1
resume=0
restart=0
from=""
device=cpu
all_settings="small-softmax small-linear-encoder small-linear small-linear-favor small-delta-everywhere small-gated-everywhere small-delta-taylor small-delta small-gated small-hybrid small-interleaved small-align-gate small-routed small-recall"
settings=$all_settings
settings_given=0
seeds="1 2 3"
phases=bench,quality,long,report
all_tasks="reverse offset skip long-reverse long-offset long-skip"
tasks=$all_tasks
task_settings="small-softmax small-delta small-align-gate small-routed small-recall"
task_steps_given=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --smoke) mode=smoke ;;
    --out) out="$2"; shift ;;
    --doc) doc="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --resume) resume=1 ;;
    --restart) restart=1 ;;
    --from) from="$2"; resume=1; shift ;;
    --only) phases="$2"; shift ;;
    --device) device="$2"; shift ;;
    --settings) settings="${2//,/ }"; settings_given=1; shift ;;
    --seeds) seeds="${2//,/ }"; shift ;;
    --tasks) tasks="${2//,/ }"; shift ;;
    --task-steps) task_steps_given="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "experiment.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

[ "$resume" = 0 ] || [ "$restart" = 0 ] ||
  { echo "experiment.sh: --restart deletes DIR, --resume and --from keep it: give one" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "experiment.sh: --jobs $jobs: expected a whole number of at least 1" >&2; exit 2; }
for phase in ${phases//,/ }; do
  case "$phase" in
    bench|quality|long|tasks|linearize|report) ;;
    *) echo "experiment.sh: --only $phases: unknown phase $phase (bench, quality, long, tasks, linearize, report)" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$phases," == *",$1,"* ]]; }
if [ "$device" != cpu ] && [ "$jobs" -gt 1 ]; then
  echo "experiment.sh: note: --jobs $jobs on $device: the runs time-slice one GPU (8 at a time on an H100 were" \
       "slower in all than one at a time would be); --jobs 1 is the better choice there" >&2
fi
for setting in $settings; do
  [[ " $all_settings " == *" $setting "* ]] ||
    { echo "experiment.sh: --settings: unknown setting $setting (one of: ${all_settings// /, })" >&2; exit 2; }
done
for task in $tasks; do
  [[ " $all_tasks " == *" $task "* ]] ||
    { echo "experiment.sh: --tasks: unknown task $task (one of: ${all_tasks// /, })" >&2; exit 2; }
done
for seed in $seeds; do
  [[ "$seed" =~ ^[123]$ ]] || { echo "experiment.sh: --seeds: $seed is not one of 1, 2, 3" >&2; exit 2; }
done

tarn=${TARN:-build/release/tools/tarn}
[ -x "$tarn" ] || { echo "experiment.sh: $tarn is missing: run tools/quickstart.sh (it sets up and builds tarn) first" >&2; exit 2; }
if wants report || wants bench; then  # the report and the benches' PNGs draw with matplotlib
  /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
    { echo "experiment.sh: python3-matplotlib is missing: run tools/setup.sh" >&2; exit 2; }
fi

# Per mode: attention lengths and the predicted seconds per run above which a length is skipped;
# training-bench lengths, steps and rounds; decoded positions; steps and validation interval
# (with its batches) of the quality runs and of the long-sequence runs.
case "$mode" in
  quick)
    attention_n=128,256,512,1024,2048,4096,8192,16384,32768,65536; attention_max_s=10
    train_n=16,128,512,2048; train_steps=2; train_rounds=1
    positions=10000
    quality_steps=100; quality_every=25; quality_batches=10
    long_steps=30; long_every=10; long_batches=5
    task_steps=300; task_every=100; task_batches=10; stage_steps=100; long_task_steps=200
    linearize=(--preset small --teacher-steps 300 --transfer 15 --finetune 15) ;;
  full)
    attention_n=128,256,512,1024,2048,4096,8192,16384,32768,65536; attention_max_s=300
    train_n=16,128,256,512,1024,2048,4096; train_steps=3; train_rounds=4
    positions=10000
    quality_steps=600; quality_every=50; quality_batches=20
    long_steps=300; long_every=25; long_batches=10
    task_steps=1200; task_every=100; task_batches=20; stage_steps=300; long_task_steps=600
    linearize=(--preset small --teacher-steps 1000 --transfer 50 --finetune 50) ;;
  smoke)
    attention_n=64,128; attention_max_s=1
    train_n=32,64; train_steps=1; train_rounds=1
    positions=50
    quality_steps=2; quality_every=1; quality_batches=1
    long_steps=2; long_every=1; long_batches=1
    task_steps=2; task_every=1; task_batches=1; stage_steps=1; long_task_steps=2
    linearize=(--preset tiny --teacher-steps 2 --transfer 1 --finetune 1) ;;
esac

if [ -n "$task_steps_given" ]; then
  [[ "$task_steps_given" =~ ^[1-9][0-9]*$ ]] ||
    { echo "experiment.sh: --task-steps $task_steps_given: expected a whole number of at least 1" >&2; exit 2; }
  task_steps=$task_steps_given
fi
if [ -n "$from" ]; then
  [ -f "$from/mode.txt" ] || { echo "experiment.sh: --from $from: no mode.txt there (not an experiment folder)" >&2; exit 2; }
  from_mode=$(cat "$from/mode.txt")
  [ "$from_mode" = "$mode" ] || { echo "experiment.sh: --from: $from holds a $from_mode run, not $mode" >&2; exit 2; }
  mkdir -p "$out"
  # The notes (commands.txt, each phase's device.txt and jobs.txt) are logs that the report
  # reads whole: where DIR has one too, it keeps both's lines, DIR2's first.
  (cd "$from" && find . -type f \( -name commands.txt -o -name device.txt -o -name jobs.txt \) -print0) |
    while IFS= read -r -d '' note; do
      [ -f "$out/$note" ] || continue
      cat "$from/$note" "$out/$note" > "$out/$note.merged" && mv "$out/$note.merged" "$out/$note"
    done
  cp -r -n "$from/." "$out/"  # -n: DIR's own mode.txt stays, for the --resume check below
fi
if [ "$phases" = report ] && [ "$resume" = 0 ]; then
  # A report-only run reads DIR and nothing else: starting DIR over would delete the runs it is
  # to report, and then archive the empty folder over the last report's inputs.
  [ -f "$out/mode.txt" ] || { echo "experiment.sh: --only report: $out holds no experiment (no mode.txt): nothing to report (run its phases first, or give --from DIR2)" >&2; exit 2; }
  resume=1
fi
if [ "$resume" = 1 ] && [ -f "$out/mode.txt" ]; then
  started_as=$(cat "$out/mode.txt")
  [ "$started_as" = "$mode" ] || { echo "experiment.sh: --resume: $out was started in $started_as mode, not $mode" >&2; exit 2; }
else
  [ "$restart" = 1 ] || [ ! -f "$out/mode.txt" ] ||
    { echo "experiment.sh: $out holds an experiment already ($(cat "$out/mode.txt") mode): add --resume to go on with it, or --restart to delete it and start over" >&2; exit 2; }
  rm -rf "$out"
  mkdir -p "$out"
  echo "$mode" > "$out/mode.txt"
fi
commands="$out/commands.txt"
echo "# tarn $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)')$(git diff --quiet HEAD 2>/dev/null || echo ' with local changes'), $mode mode$([ "$jobs" -gt 1 ] && echo ", $jobs training runs at a time")" >> "$commands"
started=$(date +%s)
exec 3>&2  # progress lines reach the terminal even from commands whose output goes to a log

# The words of a command as a shell reads them back: single quotes where a word needs them.
quoted() {
  local word words=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then words+=("$word"); else words+=("'${word//\'/\'\\\'\'}'"); fi
  done
  echo "${words[*]}"
}

# Runs a command and records it in commands.txt, as it ran.
run() {
  quoted "$@" >> "$commands"
  echo "[experiment] $(( ($(date +%s) - started) / 60 )) min: $(quoted "$@")" >&3
  "$@"
}

[ -f work/wordnet/train.txt ] || run "$tarn" prepare-corpus work/wordnet

# bench <name> <folder> <tarn bench arguments...>: skipped under --resume once
# <folder>/<name>.json exists (the bench writes it when it ends).
bench() {
  local name="$1" dir="$2"
  shift 2
  if [ "$resume" = 1 ] && [ -f "$dir/$name.json" ]; then
    echo "[experiment] $name bench: done earlier ($dir/$name.json)" >&3
    return
  fi
  run "$tarn" bench "$name" "$@" --out "$dir"
}
if wants bench; then
  # shellcheck disable=SC2046  # the smoke mode's repetitions: one, at once
  bench attention "$out" --n "$attention_n" --max-seconds "$attention_max_s" \
    $([ "$mode" = smoke ] && echo --reps 1 --min-time 0)
  train_bench=(--n "$train_n" --steps "$train_steps" --rounds "$train_rounds")
  bench train "$out" recipes/small-hybrid.yaml --attention softmax,linear,recipe "${train_bench[@]}"
  # small-delta beside them (the report adds train-*/train.csv to train.csv's rows).
  bench train "$out/train-small-delta" recipes/small-delta.yaml --attention recipe "${train_bench[@]}"
  bench decode "$out" recipes/small-hybrid.yaml --attention softmax,linear,recipe --positions "$positions"
fi

# Training runs, $jobs at a time, on $device; each on nproc / $jobs threads when there are several.
placement=(--set training.device="$device")
[ "$jobs" -gt 1 ] && placement+=(--set training.threads=$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 )))
train_setting() {  # folder, seed, recipe, extra --set flags...
  local dir="$1" seed="$2" recipe="$3"
  shift 3
  if [ "$resume" = 1 ] && [ -s "$dir/test.txt" ]; then
    echo "[experiment] $dir: done earlier" >&3
    return
  fi
  mkdir -p "$dir"
  # Under --resume an unfinished run goes on from its newest checkpoint (exact resume: the same
  # weights as a run never stopped), its log kept; otherwise, or with none, it starts afresh.
  local restart=--restart
  if [ "$resume" = 1 ] && compgen -G "$dir/step_*" > /dev/null; then
    restart=""
    echo "[experiment] $dir: goes on from its newest checkpoint" >&3
  else
    : > "$dir.log"
  fi
  # shellcheck disable=SC2086  # $budget holds several flags, $restart one or none
  run "$tarn" train "$recipe" $budget "${placement[@]}" --set training.seed="$seed" --set checkpoints.dir="$dir" "$@" \
    $restart >> "$dir.log" 2>&1 || { echo "experiment.sh: training failed, see $dir.log" >&2; return 1; }
  # A run stopped early (SIGTERM, SIGINT) exits 0 too: only one that reached its last step counts.
  grep -q 'stopped (max_steps)' "$dir.log" ||
    { echo "experiment.sh: $dir stopped before its last step, see $dir.log" >&2; return 1; }
  run "$tarn" eval --checkpoint "$dir" --data "${test_data:-work/wordnet/test.txt}" > "$dir/test.txt.part" 2>> "$dir.log" &&
    mv "$dir/test.txt.part" "$dir/test.txt" &&
    echo "$device" >> "$(dirname "$(dirname "$dir")")/device.txt"  # the phase's: where its finished runs trained
}
running=0
# The report says whether a phase's runs shared the machine (their times are then not speeds);
# train_setting notes the device of each finished run.
note_jobs() { mkdir -p "$out/$1"; echo "$jobs" >> "$out/$1/jobs.txt"; }
# start <train_setting arguments...>: in the background once $jobs > 1, waiting for a free slot.
start() { start_chain train_setting "$@"; }
# start_chain <command...>: the same for a command that trains runs one after another.
start_chain() {
  if [ "$jobs" = 1 ]; then
    "$@"
    return
  fi
  [ "$running" -lt "$jobs" ] || wait_one
  "$@" &
  running=$((running + 1))
}
finish_all() {
  while [ "$running" -gt 0 ]; do wait_one; done
}
# Stops the runs still going (the subshells and their tarn), as when one has failed.
stop_runs() {
  local p
  for p in $(jobs -p); do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
}
wait_one() {
  wait -n || { echo "experiment.sh: a training run failed: stopping the others" >&2; stop_runs; exit 1; }
  running=$((running - 1))
}
trap stop_runs EXIT

# The quality settings: same data, token budget (steps x training.tokens_per_batch) and
# hyperparameters; only the attention differs.
favor=(--set model.attention.encoder_self.feature_map=favor --set model.attention.decoder_self.feature_map=favor
       --set model.attention.cross.feature_map=favor)
# Whole softmax layers among delta layers, 3:1 in each self-attention stack (Kimi Linear's and
# arXiv 2507.06457's pattern), beside small-hybrid's windows in every layer; cross as small-hybrid.
interleaved=(--set 'model.attention.encoder_self={layers: [delta, delta, delta, softmax]}'
             --set 'model.attention.decoder_self={layers: [delta, delta, delta, softmax]}')
budget="--set training.max_steps=$quality_steps --set training.max_time_minutes=0"
budget="$budget --set validation.every_steps=$quality_every --set validation.max_batches=$quality_batches"
budget="$budget --set checkpoints.every_steps=$quality_every"
if wants quality; then
  note_jobs quality
  for seed in $seeds; do
    for setting in $settings; do
      dir="$out/quality/$setting/seed$seed"
      case "$setting" in
        small-linear-favor) start "$dir" "$seed" recipes/small-linear.yaml "${favor[@]}" ;;
        small-interleaved) start "$dir" "$seed" recipes/small-hybrid.yaml "${interleaved[@]}" ;;
        *) start "$dir" "$seed" "recipes/$setting.yaml" ;;
      esac
    done
  done
  finish_all
fi

# Long sequences: consecutive glosses packed into 2,048-token examples, two per batch.
long="--set data.pack_tokens=2048 --set data.max_source_len=2048 --set data.max_target_len=2048"
long="$long --set model.max_positions=2048 --set training.tokens_per_batch=4096"
budget="--set training.max_steps=$long_steps --set training.max_time_minutes=0"
budget="$budget --set validation.every_steps=$long_every --set validation.max_batches=$long_batches"
budget="$budget --set checkpoints.every_steps=$long_every"
if wants long; then
  note_jobs long
  # Delta in every stack (small-delta's aligned cross-attention assumes an alignment by index,
  # which masked spans and permuted sentences over 2,048 tokens break).
  for attention in softmax linear delta hybrid; do
    recipe="recipes/small-$attention.yaml"
    [ "$attention" = delta ] && recipe=recipes/small-delta-everywhere.yaml
    # shellcheck disable=SC2086
    start "$out/long/long-$attention/seed1" 1 "$recipe" $long
  done
  finish_all
fi

# Alignments other than the diagonal (issue 53): each task's pairs (tools/experiment/tasks.py),
# 512-token batches on glosses. The long sources (512 words or more, 4x any recipe's window;
# 2,048-token batches, 1,024 positions) are learned through a length curriculum, the same for
# every setting: from scratch not even softmax learned the long offset in 2,400 steps (validation
# ppl 865, the unigram level), but through it softmax learns each stage. A long-<task> run starts
# from its setting's and seed's weights (model.init_from, a new optimizer each stage) trained on
# <task> ($task_steps steps as its own runs, but with 1,024 positions), then on sources of 64, 128
# and 256 words ($stage_steps steps each at the long shape; under $out/curriculum), and trains
# $long_task_steps steps on the long sources. The same token budget for every setting of a task.
task_pairs() {  # folder of {train,valid,test}.tsv -> the --set flags reading them
  echo "--set data.kind=pairs --set data.train=$1/train.tsv --set data.valid=$1/valid.tsv
    --set data.test=$1/test.tsv --set data.tokenizer.model=work/wordnet/spm8000.model"
}
long_shape="--set model.max_positions=1024 --set data.max_source_len=1024 --set data.max_target_len=1024"
# train_curriculum <final folder> <seed> <recipe> <task>: the stages, then the long task itself
# (its last stage, in <final folder>), each from the weights of the one before.
stage_words="64 128 256"
train_curriculum() {
  local dir="$1" seed="$2" recipe="$3" task="$4" setting stage_dir from="" words steps data shape
  setting=$(basename "$(dirname "$dir")")
  for words in 0 $stage_words long; do
    case "$words" in
      0) # the short task as in its own runs but for the long runs' position table
         stage_dir="$out/curriculum/$task/$setting/seed$seed"; data="work/tasks/$task"; steps=$task_steps
         shape="--set model.max_positions=1024 --set training.tokens_per_batch=512" ;;
      long) stage_dir="$dir"; data="work/tasks/long-$task"; steps=$long_task_steps
         shape="$long_shape --set training.tokens_per_batch=2048" ;;
      *) stage_dir="$out/curriculum/long-$task-w$words/$setting/seed$seed"; data="work/tasks/long-$task/w$words"
         steps=$stage_steps; shape="$long_shape --set training.tokens_per_batch=2048" ;;
    esac
    # shellcheck disable=SC2046,SC2086  # $budget and the flags are several words each
    budget="$(task_budget "$steps")" test_data="$data/test.tsv" train_setting "$stage_dir" "$seed" "$recipe" \
      $(task_pairs "$data") $shape ${from:+--set model.init_from=$from} || return 1
    from=$stage_dir
  done
}
task_budget() {  # steps -> the flags of a task run's budget
  echo "--set training.max_steps=$1 --set training.max_time_minutes=0 --set validation.every_steps=$task_every
    --set validation.max_batches=$task_batches --set checkpoints.every_steps=$task_every"
}
if wants tasks; then
  [ -f "work/tasks/long-skip/w${stage_words##* }/test.tsv" ] ||
    run /usr/bin/python3 tools/experiment/tasks.py --corpus work/wordnet --out work/tasks --stages "${stage_words// /,}"
  note_jobs tasks
  for seed in $seeds; do
    for task in $tasks; do
      for setting in $task_settings; do
        [ "$settings_given" = 0 ] || [[ " $settings " == *" $setting "* ]] || continue
        dir="$out/tasks/$task/$setting/seed$seed"
        if [[ "$task" == long-* ]]; then
          start_chain train_curriculum "$dir" "$seed" "recipes/$setting.yaml" "${task#long-}"
        else
          # shellcheck disable=SC2046
          budget="$(task_budget "$task_steps")" test_data="work/tasks/$task/test.tsv" start "$dir" "$seed" \
            "recipes/$setting.yaml" $(task_pairs "work/tasks/$task") --set training.tokens_per_batch=512
        fi
      done
    done
  done
  finish_all
fi

# Linearizing a softmax teacher (issue 55): 10% of the teacher's steps per variant, half attention
# transfer (lr 1e-2), half fine-tune. The fine-tune anneals as a fine-tune of a pretrained model
# does: from 3e-4, about where the teacher's inverse_sqrt schedule left it (1e-3 * sqrt(100/1000)),
# down to 0 after 5 warm-up steps. On seed 1, with 10, 30 or 50 of the 100 steps for the transfer,
# that gave the linear encoder 6.77-6.82; 1e-3 gave 7.19 and the recipe's optimizer 8.98 even over
# 100 + 100 steps (docs/measurements.md, 2026-12-03).
# The teacher trained as long with that schedule is the control (tools/experiment/linearize.sh).
# From scratch for the teacher's steps too (1,100 in full mode) runs on the first seed only.
if wants linearize; then
  [ "$resume" = 1 ] || rm -rf "$out/linearize"
  lin_threads=$(nproc)
  [ "$device" = cpu ] || lin_threads=1
  TARN=$tarn run tools/experiment/linearize.sh "${linearize[@]}" --seeds "$seeds" --threads "$lin_threads" --device "$device" \
    --transfer-lr 1e-2 --finetune-lr 3e-4 --finetune-schedule linear --finetune-warmup 5 --control \
    --modes "linearized init scratch scratch-long" --long-seeds "${seeds%% *}" --out "$out/linearize" \
    > "$out/linearize.log" 2>&1 || { echo "experiment.sh: the linearize phase failed: see $out/linearize.log" >&2; exit 1; }
fi

# The report's inputs beside its plots, without checkpoints or logs: the figures can be checked,
# and --from goes on from them elsewhere.
archive_inputs() {
  local data
  data="$(cd "$(dirname "$doc")" && pwd)/experiment/data"
  rm -rf "$data"
  mkdir -p "$data"
  # The benches' files and the notes; a training run only once finished (its test.txt written).
  (cd "$out" && {
    find . -path '*/step_*' -prune -o -type f \( -name '*.csv' -o -name '*.json' -o -name jobs.txt \
      -o -name device.txt -o -name commands.txt -o -name mode.txt -o -name results.tsv \) -print0
    find . -path '*/step_*' -prune -o -type f -name test.txt -print0 |
      while IFS= read -r -d '' t; do printf '%s\0%s\0' "$t" "$(dirname "$t")/metrics.jsonl"; done
  } | xargs -0 -r cp --parents -t "$data")
  echo "[experiment] the report's inputs: $data ($(du -sh "$data" | cut -f1))" >&3
}
if wants report; then
  run /usr/bin/python3 tools/experiment/report.py --in "$out" --doc "$doc"
  archive_inputs
fi
echo "[experiment] done in $(( ($(date +%s) - started) / 60 )) min: $doc" >&2
