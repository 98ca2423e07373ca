#!/usr/bin/env bash
# tools/plot_runs.py on small synthetic metrics.jsonl files: the PNG is drawn; --dump shows that
# a step logged again after a resume is drawn once (the last line written), that a resume's
# abandoned tail and the lines before a new run (--restart) are left out, that a null metric is
# a gap; runs with equal folder names get their parent's name; a run without validation lines
# is drawn with a note; the mistakes a user can make exit 2 with one line naming the file.
#   plot_runs_test.sh <repo root>
set -euo pipefail
root=$1
python=/usr/bin/python3
plot=$root/tools/plot_runs.py

if ! "$python" -c 'import matplotlib' 2>/dev/null; then
  echo "python3-matplotlib is missing: run tools/setup.sh"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "[plot_runs_test] FAIL: $*"
  exit 1
}

# train <step> <loss> <elapsed_s>, valid <step> <ppl> <elapsed_s>: one metrics line each.
train() {
  printf '{"kind":"train","step":%s,"epoch":0,"loss":%s,"nll":%s,"ppl":1.0,"lr":0.001,' "$1" "$2" "$2"
  printf '"grad_norm":1.0,"tokens_per_s":1000,"tokens_seen":%s,"elapsed_s":%s}\n' "$(($1 * 100))" "$3"
}
valid() {
  printf '{"kind":"valid","step":%s,"nll":1.0,"ppl":%s,"tokens":100,"best":true,' "$1" "$2"
  printf '"tokens_seen":%s,"elapsed_s":%s,"memory_live_peak_bytes":1,"memory_cached_bytes":1,' "$(($1 * 100))" "$3"
  printf '"rss_peak_bytes":1}\n'
}

# exp1/seed1: killed after step 60, resumed from its checkpoint at step 30: steps 40-60 are
# logged twice (the second time with other values), a null loss at step 20, a validation at
# step 75 followed by the final train line of the same step.
mkdir -p "$work/exp1/seed1" "$work/exp2/seed1" "$work/empty-folder"
{
  train 10 9.0 10; train 20 null 20; train 30 7.0 30; valid 30 900 31
  train 40 6.0 40; train 50 5.0 50; train 60 4.0 60; valid 60 400 61
  echo '{"kind":"test","step":60,"ppl":5}'
  train 40 6.5 41; train 50 5.5 51; train 60 4.5 61; valid 60 450 62
  train 70 3.5 71; valid 75 300 76; train 75 3.2 77
} >"$work/exp1/seed1/metrics.jsonl"
# exp2/seed1: no validation lines; steps 10-40, then --restart: a new run from step 10.
{
  train 10 9.0 10; train 20 8.0 20; train 30 7.0 30; train 40 6.0 40
  train 10 5.0 5; train 20 4.0 10; train 30 3.0 15
} >"$work/exp2/seed1/metrics.jsonl"
# tail.jsonl (a file given by path; labelled <$work's name>/tail, as two runs are named seed1):
# steps 10-50, resumed from step 20 and stopped at 30 (the steps 40 and 50 of the first go are
# not drawn), and a last line cut short by a kill.
{
  train 10 9.0 10; train 20 8.0 20; valid 20 800 21; train 30 7.0 30; train 40 6.0 40
  valid 40 600 41; train 50 5.0 50; train 30 6.9 31
  printf '{"kind":"valid","step":40,"nll":1.0,"pp'
} >"$work/tail.jsonl"

out=$work/curves.png
"$python" "$plot" "$work/exp1/seed1" "$work/exp2/seed1/metrics.jsonl" "$work/tail.jsonl" \
  --out "$out" --title "synthetic runs" --dump "$work/dump.tsv" >"$work/stdout" 2>"$work/stderr" ||
  fail "exit $? on good input: $(cat "$work/stderr")"
grep -q Traceback "$work/stderr" && fail "a traceback on good input"

[ -s "$out" ] || fail "$out is missing or empty"
signature=$(head -c 8 "$out" | od -An -tx1 | tr -d ' \n')
[ "$signature" = 89504e470d0a1a0a ] || fail "$out is not a PNG (starts with $signature)"
size=$(stat -c %s "$out")
[ "$size" -gt 20000 ] || fail "$out is only $size bytes"

# series <run> <series>: "step=value" of the dumped points, in order, on one line.
series() {
  awk -F'\t' -v run="$1" -v s="$2" '$1 == run && $2 == s { printf "%s%s=%s", sep, $3, $5; sep = " " }' \
    "$work/dump.tsv"
}
expect_series() {
  local got
  got=$(series "$1" "$2")
  [ "$got" = "$3" ] || fail "$1 $2: drew '$got', expected '$3'"
}
[ "$(head -1 "$work/dump.tsv")" = "$(printf 'run\tseries\tstep\telapsed_s\tvalue')" ] ||
  fail "the dump's header: $(head -1 "$work/dump.tsv")"
# Each step once, the last line written for it; the null loss of step 20 not drawn.
expect_series exp1/seed1 train_loss "10=9.0 30=7.0 40=6.5 50=5.5 60=4.5 70=3.5 75=3.2"
expect_series exp1/seed1 valid_ppl "30=900.0 60=450.0 75=300.0"
# Only the run after the restart.
expect_series exp2/seed1 train_loss "10=5.0 20=4.0 30=3.0"
expect_series exp2/seed1 valid_ppl ""
# The resume from step 20 drops what came after it; the cut last line is skipped.
tail=$(basename "$work")/tail
expect_series "$tail" train_loss "10=9.0 20=8.0 30=6.9"
expect_series "$tail" valid_ppl "20=800.0"
[ "$(awk -F'\t' -v run="$tail" '$1 == run && $3 == 30 { print $4 }' "$work/dump.tsv")" = 31.0 ] ||
  fail "tail's step 30 does not have the elapsed_s of its last line"

expect() {  # expect <file> <text>
  grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks: $2 (it has: $(cat "$1"))"
}
expect "$work/stdout" "wrote $out"
expect "$work/stdout" "exp1/seed1: last step 75, best valid ppl 300.00 (step 75), 1.3 min"
expect "$work/stdout" "exp2/seed1: last step 30, no validation lines, 0.2 min"
expect "$work/stdout" "$tail: last step 30, best valid ppl 800.00 (step 20), 0.5 min"
expect "$work/stderr" "$work/exp2/seed1/metrics.jsonl: the steps start again from 10 at line 5"
expect "$work/stderr" "$work/exp2/seed1/metrics.jsonl: no validation lines"
expect "$work/stderr" "$work/exp1/seed1/metrics.jsonl: the steps go back 1 time(s)"
expect "$work/stderr" "$work/tail.jsonl: line 9 is cut short"

# --log-y and a single run; --dump - writes the points on stdout.
"$python" "$plot" "$work/exp2/seed1" --out "$work/one.png" --log-y --dump - >"$work/stdout" 2>&1 ||
  fail "--log-y: $(cat "$work/stdout")"
[ -s "$work/one.png" ] || fail "--log-y wrote no PNG"
expect "$work/stdout" "$(printf 'seed1\ttrain_loss\t30\t15.0\t3.0')"

# A line cut short by a kill, then the resumed run's first line appended to it: read from there.
{ train 10 9.0 10; printf '{"kind":"valid","step":20,"nll":1.0,"pp'; train 20 8.0 20; train 30 7.0 30; } \
  >"$work/spliced.jsonl"
"$python" "$plot" "$work/spliced.jsonl" --out "$work/spliced.png" --dump - >"$work/stdout" 2>"$work/stderr" ||
  fail "a spliced line: $(cat "$work/stderr")"
expect "$work/stderr" "$work/spliced.jsonl: line 2 begins with a line cut short"
[ "$(grep -c "train_loss" "$work/stdout")" = 3 ] || fail "a spliced line: $(cat "$work/stdout")"

"$python" "$plot" --help >"$work/help" || fail "--help exits non-zero"
for word in --out --title --log-y --dump "each step once per" "a new run has started" "Exit status"; do
  expect "$work/help" "$word"
done

# Mistakes: exit 2, one line on stderr naming the file, no traceback, no PNG.
expect_error() {  # expect_error <text in the message> <plot_runs.py arguments...>
  local text=$1 rc=0
  shift
  rm -f "$work/bad.png"
  "$python" "$plot" "$@" --out "$work/bad.png" >"$work/stdout" 2>"$work/stderr" || rc=$?
  [ "$rc" = 2 ] || fail "plot_runs.py $* exited $rc, not 2 ($(cat "$work/stderr"))"
  grep -q Traceback "$work/stderr" && fail "plot_runs.py $*: a traceback"
  [ "$(wc -l <"$work/stderr")" = 1 ] || fail "plot_runs.py $*: not one line on stderr: $(cat "$work/stderr")"
  expect "$work/stderr" "$text"
  [ ! -e "$work/bad.png" ] || fail "plot_runs.py $* wrote a PNG"
}
expect_error "$work/nowhere: no such file or folder" "$work/exp1/seed1" "$work/nowhere"
expect_error "$work/empty-folder: no metrics.jsonl in this folder" "$work/empty-folder"
echo '{"kind":"test","step":1,"ppl":5}' >"$work/test-only.jsonl"
expect_error "$work/test-only.jsonl: no train or valid lines" "$work/test-only.jsonl"
: >"$work/empty.jsonl"
expect_error "$work/empty.jsonl: no train or valid lines" "$work/empty.jsonl"
{ train 10 9.0 10; echo '{"kind":"train","step":20,"loss":}'; train 30 7.0 30; } >"$work/bad-json.jsonl"
expect_error "$work/bad-json.jsonl: line 2: not valid JSON" "$work/bad-json.jsonl"
{ train 10 9.0 10; echo '[1, 2]'; } >"$work/not-object.jsonl"
expect_error "$work/not-object.jsonl: line 2: not a JSON object" "$work/not-object.jsonl"
{ train 10 9.0 10; echo '{"kind":"valid","ppl":3}'; } >"$work/no-step.jsonl"
expect_error "$work/no-step.jsonl: line 2: a valid line without an integer step" "$work/no-step.jsonl"
expect_error "given twice" "$work/exp1/seed1" "$work/exp1/seed1/metrics.jsonl"
rc=0
"$python" "$plot" "$work/exp1/seed1" --out "$work/no/such/folder/c.png" >/dev/null 2>"$work/stderr" || rc=$?
[ "$rc" = 2 ] || fail "an --out in a missing folder exited $rc, not 2"
expect "$work/stderr" "$work/no/such/folder/c.png: its folder does not exist"

echo "[plot_runs_test] PASS: PNG drawn, steps once each (resume, --restart, null, cut last line), notes, help, 9 error cases exit 2"
