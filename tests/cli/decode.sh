#!/usr/bin/env bash
# The commands a user runs after training, through the tarn command line (ctest: cli_decode):
# a tiny model trained for a few steps, then eval prints its perplexity, export writes the
# HuggingFace files, generate answers one line per input line, and denoise shows one
# input/output/original block per line and ends with the word error rate.
#   decode.sh <tarn> <recipe>
tag=decode
source "$(dirname "$0")/common.sh"

# Word salad from a fixed seed: 200 training lines, 20 validation lines.
RANDOM=7
words=(the a red cat dog sees runs over small old tree stone bird child holds every wall green)
salad() {
  local n=$1 i j line
  for ((i = 0; i < n; i++)); do
    line=""
    for ((j = 0; j < 4 + RANDOM % 6; j++)); do line+="${words[RANDOM % ${#words[@]}]} "; done
    echo "${line% }"
  done
}
salad 200 >"$work/train.txt"
salad 20 >"$work/valid.txt"

if ! "$tarn" train "$recipe" --set data.train="$work/train.txt" --set data.valid="$work/valid.txt" \
    --set checkpoints.dir="$work/run" --set training.max_steps=10 >"$work/train.log" 2>&1; then
  echo "[decode] FAIL: training exited non-zero: $(tail -n 3 "$work/train.log")"
  exit 1
fi

"$tarn" eval --checkpoint "$work/run" --data "$work/valid.txt" >"$work/eval.out" 2>"$work/eval.log" ||
  fail "eval exited $?: $(tail -n 3 "$work/eval.log")"
grep -qE '^ppl [0-9]+\.[0-9]+$' "$work/eval.out" || fail "eval printed no perplexity: $(cat "$work/eval.out")"

"$tarn" export --checkpoint "$work/run" --out "$work/export" >"$work/export.log" 2>&1 ||
  fail "export exited $?: $(tail -n 3 "$work/export.log")"
for f in model.safetensors config.json spm.model; do
  [ -s "$work/export/$f" ] || fail "export wrote no $f"
done

printf 'the red cat\na small child holds every stone\nold tree\n' |
  "$tarn" generate --checkpoint "$work/run" --beam 2 --max-length 12 --no-repeat-ngram 2 \
    >"$work/generate.out" 2>"$work/generate.log" || fail "generate exited $?: $(tail -n 3 "$work/generate.log")"
[ "$(wc -l <"$work/generate.out")" = 3 ] || fail "generate: expected 3 lines, got: $(cat "$work/generate.out")"

"$tarn" denoise --checkpoint "$work/run" --data "$work/valid.txt" --count 4 --no-repeat-ngram 3 \
  >"$work/denoise.out" 2>"$work/denoise.log" || fail "denoise exited $?: $(tail -n 3 "$work/denoise.log")"
for part in input output original; do
  [ "$(grep -c "^$part: " "$work/denoise.out")" = 4 ] || fail "denoise: expected 4 '$part:' lines: $(cat "$work/denoise.out")"
done
grep -qE '^\[denoise\] 4 lines: word error rate [0-9]+\.[0-9]{3} against the originals \([0-9]+ word edits over [0-9]+ words\)$' \
  "$work/denoise.log" || fail "denoise: no word error rate line: $(tail -n 3 "$work/denoise.log")"

finish "train, eval, export, generate and denoise all answered as expected"
