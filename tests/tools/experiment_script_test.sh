#!/usr/bin/env bash
# tools/experiment.sh's own logic, without training or timing anything: bad --settings, --seeds
# and --from are refused with exit 2 and a message naming the value; --only report keeps DIR (and
# refuses one that holds no experiment); under --resume an unfinished run goes on from its
# checkpoint; the report phase started
# --from the fixed folder tests/tools/experiment_fixture copies its inputs (benches' CSV and JSON,
# finished runs' metrics.jsonl and test.txt, nothing else) beside its plots; and a report made
# --from that copy states the same quality figures; notes that both folders hold keep both's lines;
# every quality and long-sequence setting names a recipe that exists; the tasks phase trains the
# long tasks through their length curriculum.
#   experiment_script_test.sh <repo root>
set -euo pipefail
root=$1
script=$root/tools/experiment.sh
fixture=$root/tests/tools/experiment_fixture

if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "python3-matplotlib is missing: run tools/setup.sh"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TARN=/bin/true  # no phase here runs tarn but the corpus check, which it then skips

fail() {
  echo "[experiment_script_test] FAIL: $*"
  exit 1
}

# refused <text> <arguments...>: experiment.sh exits 2 and says <text> on stderr.
refused() {
  local want=$1 status=0
  shift
  # Its own --doc too: should a refusal regress, the report it makes lands here, not in docs/.
  "$script" "$@" --out "$work/refused" --doc "$work/refused_doc/experiment.md" >"$work/out.txt" 2>"$work/err.txt" || status=$?
  [ "$status" = 2 ] || fail "experiment.sh $* exited $status, not 2"
  grep -qF -- "$want" "$work/err.txt" || fail "experiment.sh $* did not say '$want' (it said: $(cat "$work/err.txt"))"
}
refused "unknown setting small-foo" --only report --settings small-softmax,small-foo
refused "--seeds: 4 is not one of 1, 2, 3" --only report --seeds 1,4
refused "no mode.txt there" --only report --from "$work"
refused "holds a quick run, not full" --full --only report --from "$fixture"
refused "holds no experiment (no mode.txt): nothing to report" --only report
# A report-only run keeps DIR as --resume does: it once deleted the runs it was to report.
mkdir -p "$work/kept/quality/small-softmax/seed1"
echo quick > "$work/kept/mode.txt"
cp "$fixture/quality/small-softmax/seed2/"{metrics.jsonl,test.txt} "$work/kept/quality/small-softmax/seed1/"
"$script" --quick --only report --out "$work/kept" --doc "$work/kept_doc/experiment.md" >"$work/kept.txt" 2>&1 ||
  fail "the report of a DIR failed: $(cat "$work/kept.txt")"
[ -s "$work/kept/quality/small-softmax/seed1/test.txt" ] || fail "--only report deleted the runs of DIR"
[ -s "$work/kept_doc/experiment/data/quality/small-softmax/seed1/test.txt" ] || fail "--only report did not archive DIR's run"
status=0
"$script" --full --only report --out "$work/kept" --doc "$work/kept_doc/experiment.md" >"$work/out.txt" 2>"$work/err.txt" || status=$?
if [ "$status" != 2 ] || ! grep -qF "started in quick mode, not full" "$work/err.txt"; then
  fail "a full report of a quick DIR was not refused (exit $status): $(cat "$work/err.txt")"
fi

# The report phase, started from the fixture: the doc, and its inputs beside the plots.
mkdir -p "$work/docs"
"$script" --quick --only report --from "$fixture" --out "$work/run" --doc "$work/docs/experiment.md" \
  >"$work/report.txt" 2>&1 || fail "the report phase failed: $(cat "$work/report.txt")"
[ -s "$work/docs/experiment.md" ] || fail "no report written"
data=$work/docs/experiment/data
for f in mode.txt commands.txt attention.csv attention.json train.csv decode.csv train-small-delta/train.csv \
  quality/device.txt quality/small-softmax/seed2/metrics.jsonl quality/small-softmax/seed2/test.txt \
  quality/small-linear/seed1/metrics.jsonl; do
  [ -f "$data/$f" ] || fail "the report's inputs lack $f"
done
# The fixture's long runs have no test.txt: unfinished, so not copied.
[ ! -e "$data/long" ] || fail "unfinished runs were copied: $(find "$data/long" -type f | head -3)"
expected=$(cd "$fixture" && find . -path ./long -prune -o -type f -print | sort)
copied=$(cd "$data" && find . -type f -print | sort)
[ "$expected" = "$copied" ] || fail "the copy is not the fixture's finished inputs: $(diff <(echo "$expected") <(echo "$copied"))"

# A report made from that copy states the same quality figures.
mkdir -p "$work/again"
"$script" --quick --only report --from "$data" --out "$work/run2" --doc "$work/again/experiment.md" \
  >"$work/report2.txt" 2>&1 || fail "the report from the copy failed: $(cat "$work/report2.txt")"
first=$(grep -F '**Quality, test ppl' "$work/docs/experiment.md") || fail "the report has no quality headline"
grep -qF -- "$first" "$work/again/experiment.md" || fail "the report from the copy differs in: $first"
# A DIR with notes of its own (a run of this machine's) keeps both folders' lines, DIR2's first.
mkdir -p "$work/grown/quality"
echo quick > "$work/grown/mode.txt"
echo cpu > "$work/grown/quality/device.txt"
echo "# this machine's run" > "$work/grown/commands.txt"
"$script" --quick --only report --from "$fixture" --out "$work/grown" --doc "$work/grown_doc/experiment.md" \
  >"$work/report3.txt" 2>&1 || fail "the report into a DIR with notes failed: $(cat "$work/report3.txt")"
[ "$(cat "$work/grown/quality/device.txt")" = "$(cat "$fixture/quality/device.txt"; echo cpu)" ] ||
  fail "device.txt did not keep both folders' lines: $(cat "$work/grown/quality/device.txt")"
head -n "$(wc -l < "$fixture/commands.txt")" "$work/grown/commands.txt" | cmp -s - "$fixture/commands.txt" ||
  fail "commands.txt does not start with the fixture's"
grep -qF "# this machine's run" "$work/grown/commands.txt" || fail "commands.txt lost DIR's own lines"
# Every quality and long-sequence setting trains a recipe that exists: a stand-in tarn that
# refuses a missing recipe, in smoke mode (no training; the stand-in only answers as tarn would).
fake=$work/fake_tarn
cat > "$fake" <<'FAKE'
#!/usr/bin/env bash
case "$1" in
  train) [ -f "$2" ] || { echo "no recipe $2" >&2; exit 2; }
         echo "$2 $*" >> "$FAKE_LOG"; echo "[train] stopped (max_steps)"; echo "[test] nll 1.0 | ppl 2.72" ;;
  eval) echo "ppl 1" ;;
  prepare-corpus) ;;
esac
FAKE
chmod +x "$fake"
export FAKE_LOG=$work/trained.txt
(cd "$root" && TARN=$fake "$script" --smoke --only quality,long --seeds 1 --out "$work/smoke" \
  >"$work/smoke.txt" 2>&1) || fail "a setting's recipe is missing: $(tail -3 "$work/smoke.txt")"
settings=$(sed -n 's/^all_settings="\(.*\)"$/\1/p' "$script")
[ -n "$settings" ] || fail "no all_settings line in experiment.sh"
for setting in $settings; do
  [ -s "$work/smoke/quality/$setting/seed1/test.txt" ] || fail "setting $setting did not run"
done
[ "$(wc -l < "$FAKE_LOG")" = "$(( $(echo "$settings" | wc -w) + 4 ))" ] ||
  fail "expected one training run per setting and 4 long runs: $(cat "$FAKE_LOG")"
grep -q "^recipes/small-delta-everywhere.yaml .*long-delta" "$FAKE_LOG" ||
  fail "the long delta run does not train small-delta-everywhere"

# Under --resume an unfinished run goes on from its checkpoint (no --restart, its log kept); one
# without a checkpoint starts afresh.
rm -f "$FAKE_LOG"
mkdir -p "$work/res/quality/small-softmax/seed1/step_1"
echo smoke > "$work/res/mode.txt"
echo "the run's first part" > "$work/res/quality/small-softmax/seed1.log"
(cd "$root" && TARN=$fake "$script" --smoke --only quality --settings small-softmax,small-linear --seeds 1 --resume \
  --out "$work/res" >"$work/res.txt" 2>&1) || fail "the resumed quality phase failed: $(tail -3 "$work/res.txt")"
grep -q "^recipes/small-softmax.yaml " "$FAKE_LOG" || fail "the unfinished run did not train: $(cat "$FAKE_LOG")"
! grep -q "^recipes/small-softmax.yaml .*--restart" "$FAKE_LOG" || fail "the unfinished run started over: $(cat "$FAKE_LOG")"
grep -q "^recipes/small-linear.yaml .*--restart" "$FAKE_LOG" || fail "a run without a checkpoint did not start afresh: $(cat "$FAKE_LOG")"
grep -qF "the run's first part" "$work/res/quality/small-softmax/seed1.log" || fail "the resumed run's log lost its first part"
grep -qF "goes on from its newest checkpoint" "$work/res.txt" || fail "experiment.sh did not say the run goes on"

# A DIR that holds an experiment is started over only when asked (--restart): a new phase run into
# an old DIR without --resume once deleted an hour of training.
status=0
(cd "$root" && TARN=$fake "$script" --smoke --only quality --settings small-softmax --seeds 1 --out "$work/res" \
  >"$work/out.txt" 2>"$work/err.txt") || status=$?
[ "$status" = 2 ] && grep -qF "holds an experiment already (smoke mode): add --resume" "$work/err.txt" ||
  fail "a DIR with an experiment was not refused (exit $status): $(cat "$work/err.txt")"
[ -s "$work/res/quality/small-softmax/seed1.log" ] || fail "the refused call deleted DIR's runs"
refused "give one" --only report --resume --restart
(cd "$root" && TARN=$fake "$script" --smoke --only quality --settings small-softmax --seeds 1 --restart --out "$work/res" \
  >"$work/out.txt" 2>&1) || fail "--restart failed: $(tail -3 "$work/out.txt")"
! grep -qF "the run's first part" "$work/res/quality/small-softmax/seed1.log" || fail "--restart kept DIR's old run"

# The tasks phase (issue 53): a short task trains once; a long one goes through its length
# curriculum, each stage from the last one's weights and the long run from the 256-word stage.
# In a copy of the scripts with a corpus of its own, so that tasks.py writes nothing in the repo.
copy=$work/copy
mkdir -p "$copy/tools" "$copy/work/wordnet"
cp -r "$root/tools/experiment.sh" "$root/tools/experiment" "$copy/tools/"
cp -r "$root/recipes" "$copy/"
for split in train valid test; do
  for i in $(seq 1 40); do echo "gloss $i of $split has a few more words than two"; done > "$copy/work/wordnet/$split.txt"
done
rm -f "$FAKE_LOG"
(cd "$copy" && TARN=$fake tools/experiment.sh --smoke --only tasks --tasks offset,long-offset --settings small-softmax \
  --seeds 1 --out "$work/tasks" >"$work/tasks.txt" 2>&1) || fail "the tasks phase failed: $(tail -3 "$work/tasks.txt")"
[ "$(wc -l < "$FAKE_LOG")" = 6 ] || fail "expected the offset run, 4 curriculum stages and the long run: $(cat "$FAKE_LOG")"
[ -s "$copy/work/tasks/long-offset/w64/train.tsv" ] || fail "tasks.py wrote no 64-word stage"
grep -q "checkpoints.dir=$work/tasks/tasks/offset/small-softmax/seed1 .*data.train=work/tasks/offset/train.tsv " "$FAKE_LOG" ||
  fail "the short offset run did not train on offset: $(cat "$FAKE_LOG")"
previous=$work/tasks/curriculum/offset/small-softmax/seed1
for stage in long-offset-w64 long-offset-w128 long-offset-w256; do
  grep -q "checkpoints.dir=$work/tasks/curriculum/$stage/small-softmax/seed1 .*model.init_from=$previous " "$FAKE_LOG" ||
    fail "stage $stage does not start from $previous: $(cat "$FAKE_LOG")"
  previous=$work/tasks/curriculum/$stage/small-softmax/seed1
done
grep -q "checkpoints.dir=$work/tasks/tasks/long-offset/small-softmax/seed1 .*data.train=work/tasks/long-offset/train.tsv .*model.init_from=$previous " "$FAKE_LOG" ||
  fail "the long run does not start from the last stage: $(cat "$FAKE_LOG")"
[ -s "$work/tasks/tasks/long-offset/small-softmax/seed1/test.txt" ] || fail "the long run was not evaluated"

# The linearize phase (issue 55): a teacher, its control per seed, each variant three ways per
# seed and from scratch for the teacher's steps too on the first seed, in results.tsv, which the
# report turns into its section and keeps beside its plots.
rm -f "$FAKE_LOG"
(cd "$root" && TARN=$fake "$script" --smoke --only linearize,report --seeds 1,2 --out "$work/lin" \
  --doc "$work/lin_doc/experiment.md" >"$work/lin.txt" 2>&1) || fail "the linearize phase failed: $(tail -3 "$work/lin.txt")"
results=$work/lin_doc/experiment/data/linearize/results.tsv
[ -f "$results" ] || fail "the report's inputs lack linearize/results.tsv"
[ "$(wc -l < "$results")" = 25 ] || fail "expected a header, the teacher, 2 controls and 21 variant runs: $(cat "$results")"
[ "$(wc -l < "$FAKE_LOG")" = 24 ] || fail "expected 24 training runs: $(cat "$FAKE_LOG")"
[ "$(grep -c -- "training.seed=1 --set training.max_steps=4 " "$FAKE_LOG")" = 3 ] ||
  fail "expected 3 runs from scratch of the teacher's 2 steps + 1 + 1 on seed 1: $(cat "$FAKE_LOG")"
grep -q "model.init_from=.*linearize.steps=1 .*model.attention.encoder_self.feature_map=hedgehog\|feature_map=hedgehog.*model.init_from=.*linearize.steps=1" "$FAKE_LOG" ||
  fail "no linearized Hedgehog run: $(cat "$FAKE_LOG")"
grep -qF "**Linearized all-delta:** test ppl 2.72, 1.00× the teacher's 2.72, NOT better than from scratch (2.72), NOT better than from scratch for the teacher's steps too (2.72)" \
  "$work/lin_doc/experiment.md" || fail "the report lacks the linearize facts"
[ -s "$work/lin_doc/experiment/linearize_test_ppl.png" ] || fail "no linearize plot"
echo "[experiment_script_test] ok"
