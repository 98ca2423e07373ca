#!/usr/bin/env bash
# tarn import, eval, generate and export from the command line on the HuggingFace fixture
# (tests/fixtures/hf_bart_tiny; ctest: cli_hf_import): eval's NLL is HF's within 1e-5
# relative, generate's lines are HF's greedy outputs as HF's tokenizer decodes them, and the
# export carries the byte-level BPE files. Needs Debian's python3 for reading expected.json only.
#   hf_import.sh <tarn> <recipe>
tag=cli-hf
source "$(dirname "$0")/common.sh"
fixture="$(dirname "$0")/../fixtures/hf_bart_tiny"
expected="$fixture/expected.json"

"$tarn" import "$fixture/hf" --out "$work/bart" 2>"$work/import.log" || fail "import: exit $?: $(tail -n 3 "$work/import.log")"
grep -q "not applied" "$work/import.log" || fail "import did not list the config.json fields it does not apply"

nll=$("$tarn" eval --checkpoint "$work/bart" --data "$fixture/pairs.tsv" 2>/dev/null | awk '/^nll/ {print $2}')
python3 - "$expected" "$nll" <<'PY' || fail "eval: nll $nll is not HF's"
import json, sys
hf = json.load(open(sys.argv[1]))["pairs_mean_nll"]
got = float(sys.argv[2])
print(f"[cli-hf] eval nll {got:.6f}, HF {hf:.7f}")
sys.exit(0 if abs(got - hf) <= 1e-5 * hf + 5e-7 else 1)  # eval prints 6 decimals
PY

max_length=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generate_max_length"] - 1)' "$expected")
python3 -c 'import json,sys; [print(g["source"]) for g in json.load(open(sys.argv[1]))["greedy"]]' "$expected" \
  | "$tarn" generate --checkpoint "$work/bart" --max-length "$max_length" >"$work/generated.txt" 2>/dev/null \
  || fail "generate: exit $?"
python3 -c 'import json,sys; sys.stdout.write("".join(g["output_text"] + "\n" for g in json.load(open(sys.argv[1]))["greedy"]))' \
  "$expected" >"$work/hf.txt"
cmp -s "$work/generated.txt" "$work/hf.txt" && echo "[$tag] ok: greedy generation is HF's, line for line" \
  || fail "generate: the outputs differ from HF's greedy outputs"

"$tarn" export --checkpoint "$work/bart" --out "$work/export" 2>/dev/null || fail "export: exit $?"
for f in config.json model.safetensors tokenizer.json vocab.json merges.txt; do
  [ -s "$work/export/$f" ] || fail "export: no $f"
done
[ ! -e "$work/export/spm.model" ] || fail "export: a byte-level BPE model exported an spm.model"
finish "import, eval, generate and export agree with HuggingFace"
