#!/usr/bin/env bash
# tools/gpu_check.sh where there is no GPU (CI, a developer's machine): `run` refuses at once with
# exit 2 and says why; with a GPU but no bundle it names the command that builds one; bad
# arguments exit 2; --help tells every subcommand; `exec` refuses alike, and with a stand-in GPU
# and a bundle it runs the command with the bundle's tarn as $TARN; `perf` refuses alike, and
# with a stand-in GPU and a stand-in bench it merges the bench's JSON into perf-<date>-<commit>.json
# and prints the table, recording that torch and FLA were unavailable. Skipped (77) with a GPU.
#   gpu_check_test.sh <repo root>
set -uo pipefail
root=$1
script=$root/tools/gpu_check.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "[gpu_check_test] FAIL: $*"
  exit 1
}

# expect <status> <text> <args...>: gpu_check.sh <args> exits <status> and prints <text>.
expect() {
  local want=$1 text=$2
  shift 2
  local out rc
  out=$(cd "$work" && PATH="$path" bash "$script" "$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$want" ] || fail "gpu_check.sh $* exited $rc, not $want: $out"
  grep -qF -- "$text" <<<"$out" || fail "gpu_check.sh $* did not say '$text': $out"
}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "[gpu_check_test] a GPU is present: tools/gpu_check.sh run is the real test here"
  exit 77
fi

path=$PATH
expect 2 "no GPU here" run --out "$work/out"
[ ! -e "$work/out/summary.md" ] || fail "run without a GPU wrote a summary"
expect 0 "tools/gpu_check.sh bundle" --help
expect 0 "tools/gpu_check.sh run" --help
expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "--bundle needs a folder" run --bundle
expect 2 "unknown argument '--fast'" run --fast
expect 0 "tools/gpu_check.sh exec" --help
expect 0 "tools/gpu_check.sh perf" --help
expect 2 "no GPU here" exec -- true
expect 2 "no GPU here" perf --out "$work/out"
[ ! -e "$work/out/perf.log" ] || fail "perf without a GPU wrote a log"
expect 2 "unknown argument '--fast'" perf --fast
expect 2 "--budget needs seconds" perf --budget 10
expect 2 "no command" exec --
expect 2 "the command comes after --" exec true

# A machine whose nvidia-smi lists a GPU, but no bundle was carried to it.
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "GPU 0: Stand-in (UUID: GPU-0)"\n' >"$work/bin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi"
path="$work/bin:$PATH"
expect 2 "no bundle at $work/nothing" run --bundle "$work/nothing" --out "$work/out"
expect 2 "no bundle at $work/nothing" exec --bundle "$work/nothing" -- true
# A stand-in bundle: exec puts its programs first on PATH and names its tarn in TARN.
mkdir -p "$work/bundle/bin" "$work/bundle/lib"
for exe in tarn_cuda_tests tarn; do printf '#!/bin/sh
echo "%s ran"
' "$exe" >"$work/bundle/bin/$exe"; done
# tarn bench train --out DIR writes DIR/train.csv, as the real one (perf's training steps).
# tarn bench attention without --out prints its CSV (perf's routed cross-attention step).
cat >>"$work/bundle/bin/tarn" <<'EOF'
if [ "$1 $2" = "bench attention" ]; then echo "device,algo,feature_map,N"; echo "cuda,routed_cross,-,1024"; exit 0; fi
[ "$1 $2" = "bench train" ] || exit 0
while [ $# -gt 0 ]; do [ "$1" = --out ] && dir=$2; shift; done
mkdir -p "$dir"
printf 'attention,precision,N,batch,tokens_per_batch,step_ms,tokens_per_s,alloc_peak_MiB,rss_peak_MiB,status\n' >"$dir/train.csv"
printf 'recipe,bf16,512,32,16384,100.0,327680,2000.0,900.0,ok\nrecipe,bf16,2048,8,16384,50.0,655360,3000.0,900.0,ok\n' >>"$dir/train.csv"
EOF
chmod +x "$work/bundle/bin/"*
expect 0 "tarn ran" exec --bundle "$work/bundle" -- sh -c '"$TARN"'
expect 0 "tarn_cuda_tests ran" exec --bundle "$work/bundle" -- tarn_cuda_tests
expect 2 "has no cuda_attention_bench" perf --bundle "$work/bundle" --out "$work/perf"

# perf with a stand-in bench that writes the --json file the real one would (a row a shape and
# algorithm, one of them too large): python3 has no torch here (or no GPU for it), FLA no wheels.
cat >"$work/bundle/bin/cuda_attention_bench" <<'EOF'
#!/bin/sh
json="" d=64 algos=""
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json=$2; shift 2 ;;
    --d) d=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    *) shift ;;
  esac
done
echo "stand-in bench d=$d algos=$algos"
rows="" sep=""
for a in $(echo "$algos" | tr , ' '); do
  case "$a" in linear*) k=linear_causal ;; delta*) k=delta_causal ;; *) k=softmax_causal ;; esac
  case "$a" in *bf16) p=bf16 ;; *) p=f32 ;; esac
  for bh in 8 128; do for n in 1024 4096 16384; do
    row="\"algo\": \"$a\", \"kernel\": \"$k\", \"precision\": \"$p\", \"bh\": $bh, \"n\": $n, \"d\": $d, \"e\": $d"
    if [ "$bh" = 128 ] && [ "$n" = 16384 ] && [ "$d" = 128 ]; then
      rows="$rows$sep{$row, \"status\": \"unsupported: needs 999.0 GiB of device memory\"}"
    else
      rows="$rows$sep{$row, \"status\": \"ok\", \"fwd_ms\": 1.5, \"fwdbwd_ms\": 4.5, \"sets\": 3}"
    fi
    sep=", "
  done; done
done
printf '{"tool": "cuda_attention_bench", "complete": true, "checks": [], "rows": [%s]}\n' "$rows" >"$json"
EOF
chmod +x "$work/bundle/bin/cuda_attention_bench"
echo 0123456789abcdef0123456789abcdef01234567 >"$work/bundle/commit"
echo "built for the test" >"$work/bundle/BUILD_INFO"
mkdir -p "$work/nowheels"
out=$(cd "$work" && PATH="$path" bash "$script" perf --bundle "$work/bundle" --out "$work/perf" --wheels "$work/nowheels" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "perf with a stand-in bench exited $rc: $out"
json=$(find "$work/perf" -name 'perf-*-0123456.json' | head -1)
[ -n "$json" ] || fail "perf wrote no perf-<date>-0123456.json: $(ls "$work/perf")"
grep -qF '| linear_causal | tarn bf16 | 8 | 1024 | 64 | 1.500 | 4.500 |' <<<"$out" || fail "perf printed no table: $out"
grep -qF 'unsupported: needs 999.0 GiB' <<<"$out" || fail "the unsupported row is not in the table: $out"
/usr/bin/python3 - "$json" <<'EOF' || fail "the perf JSON is not as expected ($json)"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["commit"] == "0123456789abcdef0123456789abcdef01234567", doc["commit"]
assert doc["fla"].startswith("unavailable ("), doc["fla"]
tarn = [r for r in doc["rows"] if r["impl"] == "tarn" and r["status"] == "ok"]
assert len(tarn) == 6 * 6 + 6 * 2 - 2, len(tarn)
assert set(doc["steps"]) == {"steps_base-softmax", "steps_base-delta", "steps_torch", "routed_cross", "tarn_d64",
                             "tarn_d128", "measure"}, doc["steps"]
assert all(v.startswith("exit 0") for v in doc["steps"].values()), doc["steps"]
EOF
[ -s "$work/perf/perf_table.md" ] && [ -s "$work/perf/perf.log" ] || fail "perf_table.md or perf.log missing"
grep -qF 'cuda,routed_cross,-,1024' "$work/perf/perf.log" || fail "perf.log has no routed cross-attention rows"
# The training steps (issue 51): the stand-in tarn's rows, with PyTorch unavailable here.
grep -qF '| 2048 | tarn base-delta | 8 | 50.0 | 655,360 |' <<<"$out" || fail "perf printed no step table: $out"
step_json=$(find "$work/perf" -name 'step-perf-*-0123456789ab.json' | head -1)
[ -n "$step_json" ] || fail "perf wrote no step-perf-<date>-<commit>.json: $(ls "$work/perf")"
/usr/bin/python3 - "$step_json" <<'EOF' || fail "the step JSON is not as expected ($step_json)"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["torch"]["unavailable"], doc["torch"]
assert sorted(r["system"] for r in doc["rows"]) == ["tarn base-delta"] * 2 + ["tarn base-softmax"] * 2, doc["rows"]
EOF
[ "$(find "$work/perf" -type f | wc -l)" -le 8 ] || fail "perf leaves more than the 8 files the device tool returns"

rm "$work/bundle/bin/tarn"
expect 2 "has no tarn" exec --bundle "$work/bundle" -- true
echo "[gpu_check_test] run, exec and perf refuse without a GPU (exit 2) and without a bundle; bad arguments" \
     "exit 2; exec runs a command with the bundle's programs; perf merges a stand-in bench's JSON into its own"
