#!/usr/bin/env bash
# Issue 55's experiment, item 7 (tools/experiment.sh's linearize phase runs it and its report
# makes docs/experiment.md's section "Linearizing a softmax model"): a softmax "pretrained"
# teacher trained TEACHER_STEPS steps on WordNet, then three variants (linear Hedgehog encoder;
# Hedgehog everywhere; the delta rule everywhere)
#   linearized:   model.init_from the teacher, linearize.steps TRANSFER, then FINETUNE steps;
#   init only:    model.init_from the teacher, no transfer, TRANSFER + FINETUNE steps;
#   from scratch: TRANSFER + FINETUNE steps;
#   from scratch, long (mode scratch-long, over LONG_SEEDS): TEACHER_STEPS + TRANSFER + FINETUNE
#                 steps, the teacher's included: all the steps behind a linearized model, spent on
#                 the variant itself, for a user who has no pretrained model;
#   teacher, continued: the teacher itself trained TRANSFER + FINETUNE more steps with the
#                       fine-tune's optimizer (softmax: what those steps and that schedule are
#                       worth without any change of attention), with --control;
# over SEEDS (LONG_SEEDS for scratch-long, default SEEDS); each run's test perplexity goes to
# OUT/results.tsv (variant, seed, mode, test ppl).
#   tools/experiment/linearize.sh [--preset tiny|small] [--teacher-steps N] [--transfer N]
#                                 [--finetune N] [--seeds "1 2 3"] [--out DIR] [--threads T]
#                                 [--variants "linear-encoder all-linear all-delta"]
#                                 [--modes "linearized init scratch scratch-long"]
#                                 [--long-seeds "1"] [--control]
#                                 [--transfer-lr X] [--finetune-lr X] [--finetune-warmup N]
#                                 [--finetune-schedule recipe|constant|linear|cosine|inverse_sqrt]
#                                 [--device cpu|cuda|cuda:N]
# The fine-tune (linearized and init-only runs, and the control) keeps the recipe's optimizer
# (inverse_sqrt from 1e-3 after 100 warm-up steps for small-softmax) unless --finetune-* say
# otherwise; a run from scratch always keeps the recipe's. A run whose log in OUT already holds
# its test perplexity is not run again (delete OUT, or the log, to start it over).
# Needs work/wordnet (tarn prepare-corpus work/wordnet) and its 8000-piece tokenizer
# (work/wordnet/spm8000.model, which any small recipe trains). The issue's scale is --preset
# small --teacher-steps 2000 --transfer 100 --finetune 100 (10% of the teacher's steps).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tarn=${TARN:-$root/build/release/tools/tarn}
preset=tiny teacher_steps=2000 transfer=100 finetune=100 seeds="1 2 3" out=runs/linearize threads=1
variants="linear-encoder all-linear all-delta" modes="linearized init scratch" long_seeds="" control=0
transfer_lr=3e-3 finetune_lr="" finetune_warmup="" finetune_schedule=recipe device=cpu
while [ $# -gt 0 ]; do
  case $1 in
    --preset) preset=$2; shift 2 ;;
    --teacher-steps) teacher_steps=$2; shift 2 ;;
    --transfer) transfer=$2; shift 2 ;;
    --finetune) finetune=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --long-seeds) long_seeds=$2; shift 2 ;;
    --control) control=1; shift ;;
    --transfer-lr) transfer_lr=$2; shift 2 ;;
    --finetune-lr) finetune_lr=$2; shift 2 ;;
    --finetune-warmup) finetune_warmup=$2; shift 2 ;;
    --finetune-schedule) finetune_schedule=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    *) echo "linearize.sh: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
done
case $preset in
  tiny) recipe=$root/recipes/tiny.yaml ;;
  small) recipe=$root/recipes/small-softmax.yaml ;;
  *) echo "linearize.sh: --preset tiny or small, got $preset" >&2; exit 2 ;;
esac
for m in $modes; do
  case $m in linearized|init|scratch|scratch-long) ;;
    *) echo "linearize.sh: --modes takes linearized, init, scratch, scratch-long; got $m" >&2; exit 2 ;;
  esac
done
finetune_opts=()  # the fine-tune's optimizer, where it differs from the recipe's
[ "$finetune_schedule" = recipe ] || finetune_opts+=(--set optimizer.schedule="$finetune_schedule")
[ -z "$finetune_lr" ] || finetune_opts+=(--set optimizer.lr="$finetune_lr")
[ -z "$finetune_warmup" ] || finetune_opts+=(--set optimizer.warmup_steps="$finetune_warmup")
mkdir -p "$out"
common=(--set data.train=work/wordnet/train.txt --set data.valid=work/wordnet/valid.txt
        --set data.test=work/wordnet/test.txt --set data.tokenizer.model=work/wordnet/spm8000.model
        --set logging.tensorboard=off --set training.threads="$threads" --set logging.every_steps=100
        --set training.max_time_minutes=0 --set training.device="$device")  # the step counts rule (small-softmax stops at 10 minutes)
softmax=(--set model.attention.encoder_self.kind=softmax --set model.attention.decoder_self.kind=softmax
         --set model.attention.cross.kind=softmax)
declare -A variant=(
  [linear-encoder]="--set model.attention.encoder_self.kind=linear --set model.attention.encoder_self.feature_map=hedgehog --set model.attention.decoder_self.kind=softmax --set model.attention.cross.kind=softmax"
  [all-linear]="--set model.attention.encoder_self.kind=linear --set model.attention.encoder_self.feature_map=hedgehog --set model.attention.decoder_self.kind=linear --set model.attention.decoder_self.feature_map=hedgehog --set model.attention.cross.kind=linear --set model.attention.cross.feature_map=hedgehog"
  [all-delta]="--set model.attention.encoder_self.kind=delta --set model.attention.decoder_self.kind=delta --set model.attention.cross.kind=delta")
test_ppl() { grep -o '\[test\] nll [0-9.]* | ppl [0-9.]*' "$1" | awk '{print $6}' | tail -1; }
run() {  # run NAME ARGS...: a training run in OUT/NAME, its log beside it
  local name=$1; shift
  if [ -n "$(test_ppl "$out/$name.log" 2>/dev/null)" ]; then
    echo "linearize.sh: $name: done earlier ($out/$name.log)" >&2
    return
  fi
  echo "linearize.sh: $name" >&2
  "$tarn" train "$recipe" "${common[@]}" "$@" --set checkpoints.dir="$out/$name" >"$out/$name.log" 2>&1 ||
    { echo "linearize.sh: $name failed: $(tail -n 2 "$out/$name.log")" >&2; exit 1; }
}
from_scratch() {  # from_scratch VARIANT SEED MODE STEPS: from scratch, with the recipe's optimizer
  local v=$1 seed=$2 mode=$3 steps=$4
  # shellcheck disable=SC2086  # the variant's --set flags
  run "$v-$mode-$seed" ${variant[$v]} --set training.seed="$seed" --set training.max_steps="$steps" \
    --set validation.every_steps="$steps"
  echo -e "$v\t$seed\t$mode-$steps\t$(test_ppl "$out/$v-$mode-$seed.log")" >>"$out/results.tsv"
}
total=$((transfer + finetune))
[ -d "$out/teacher/step_$teacher_steps" ] ||
  run teacher "${softmax[@]}" --set training.max_steps="$teacher_steps" --set checkpoints.every_steps="$teacher_steps" \
    --set validation.every_steps="$teacher_steps"
echo -e "variant\tseed\tmode\ttest_ppl" >"$out/results.tsv"
echo -e "teacher\t1\tsoftmax-$teacher_steps\t$(test_ppl "$out/teacher.log")" >>"$out/results.tsv"
if [ "$control" = 1 ]; then
  for seed in $seeds; do
    run "teacher-continued-$seed" "${softmax[@]}" "${finetune_opts[@]}" --set training.seed="$seed" \
      --set model.init_from="$out/teacher" --set training.max_steps="$total" --set validation.every_steps="$total"
    echo -e "teacher\t$seed\tcontinued-$total\t$(test_ppl "$out/teacher-continued-$seed.log")" >>"$out/results.tsv"
  done
fi
for v in $variants; do
  [ -n "${variant[$v]:-}" ] || { echo "linearize.sh: unknown variant $v (linear-encoder, all-linear, all-delta)" >&2; exit 2; }
  for seed in $seeds; do
    if [[ " $modes " == *" linearized "* ]]; then
      # shellcheck disable=SC2086  # the variant's --set flags
      run "$v-linearized-$seed" ${variant[$v]} "${finetune_opts[@]}" --set training.seed="$seed" \
        --set model.init_from="$out/teacher" --set linearize.steps="$transfer" --set linearize.lr="$transfer_lr" \
        --set training.max_steps="$finetune" --set validation.every_steps="$finetune"
      echo -e "$v\t$seed\tlinearized-$transfer+$finetune\t$(test_ppl "$out/$v-linearized-$seed.log")" >>"$out/results.tsv"
    fi
    if [[ " $modes " == *" init "* ]]; then
      # shellcheck disable=SC2086
      run "$v-init-$seed" ${variant[$v]} "${finetune_opts[@]}" --set training.seed="$seed" \
        --set model.init_from="$out/teacher" --set training.max_steps="$total" --set validation.every_steps="$total"
      echo -e "$v\t$seed\tinit-only-$total\t$(test_ppl "$out/$v-init-$seed.log")" >>"$out/results.tsv"
    fi
    if [[ " $modes " == *" scratch "* ]]; then
      from_scratch "$v" "$seed" scratch "$total"
    fi
  done
  if [[ " $modes " == *" scratch-long "* ]]; then
    for seed in ${long_seeds:-$seeds}; do
      from_scratch "$v" "$seed" scratch-long $((teacher_steps + total))
    done
  fi
done
cat "$out/results.tsv"
