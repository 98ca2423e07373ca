#!/usr/bin/env bash
# Every command README.md shows in its ```sh blocks, checked against the programs it names:
#   - `tarn ...` lines: the quick ones run as shown (tarn --version, tarn config RECIPE [--set],
#     tarn config --keys); every other one runs with --help appended, which makes tarn refuse
#     (exit 2) a command or flag it does not have, and a `tarn train RECIPE --set K=V ...` line
#     also has its recipe and overrides validated by `tarn config RECIPE --set K=V ...`;
#   - `tools/X` and `build/...` scripts and programs: the file exists (tools/ ones in the tree),
#     and tools/*.py answer --help;
#   - `cmake --install` into an empty folder, then that folder's bin/tarn --version.
# Long lines continued with a backslash are joined; comments after `#` are dropped.
#   readme_commands_test.sh <repo root> <tarn binary> <build folder>
set -uo pipefail
root=$1 tarn=$2 build=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0 checked=0
fail() {
  echo "[readme_commands] FAIL: $*"
  failures=$((failures + 1))
}
cd "$root"

# The README's shell lines, one command per line.
awk '/^```sh$/ {on = 1; next} /^```$/ {on = 0} on' README.md |
  sed -e 's/[[:space:]]#.*$//' |
  awk '{ if (sub(/\\$/, "")) { held = held $0 } else { print held $0; held = "" } }' |
  sed -e 's/[[:space:]]*$//' -e '/^$/d' >"$work/commands"
[ -s "$work/commands" ] || fail "no commands found in README.md's sh blocks"

run_tarn() {  # run_tarn <line> <words after "tarn" ...>
  local line=$1
  shift
  local out status
  case "$1 ${2:-}" in
    "--version "*)
      out=$("$tarn" --version 2>&1) && grep -qE '^tarn [0-9]+\.[0-9]+\.[0-9]+ \(commit ' <<<"$out" ||
        fail "$line -> $out"
      ;;
    "config --keys" | "config recipes/"*)
      out=$("$tarn" "$@" 2>&1) || fail "$line -> exit $?: $(tail -n 2 <<<"$out")"
      ;;
    *)
      out=$("$tarn" "$@" --help 2>&1) || fail "$line -> exit $? with --help: $(tail -n 2 <<<"$out")"
      if [ "$1" = train ]; then  # the recipe and every --set checked as `tarn config` checks them
        local args=("$@")
        local keep=(config "${args[1]}") i
        for ((i = 2; i < ${#args[@]}; i++)); do
          [ "${args[i]}" = --set ] && keep+=(--set "${args[i + 1]}")
        done
        out=$("$tarn" "${keep[@]}" 2>&1) || fail "$line -> tarn ${keep[*]}: exit $?: $(tail -n 2 <<<"$out")"
      fi
      ;;
  esac
  checked=$((checked + 1))
}

while IFS= read -r line; do
  read -r -a words <<<"$line"
  # Skip leading VAR=value words and an `echo ... |` feeding the command.
  rest=("${words[@]}")
  if [[ "$line" == *"| tarn "* ]]; then
    read -r -a rest <<<"tarn ${line#*| tarn }"
  fi
  while [[ ${#rest[@]} -gt 0 && "${rest[0]}" == *=* ]]; do rest=("${rest[@]:1}"); done
  first=${rest[0]:-}
  case "$first" in
    tarn) run_tarn "$line" "${rest[@]:1}" ;;
    mpirun)  # the tarn command it launches
      for ((i = 1; i < ${#rest[@]}; i++)); do
        if [ "${rest[i]}" = tarn ]; then run_tarn "$line" "${rest[@]:i+1}"; break; fi
      done
      ;;
    tools/*)
      [ -e "$first" ] || fail "$line -> $first does not exist"
      if [[ "$first" == *.py ]]; then
        /usr/bin/python3 "$first" --help >/dev/null 2>&1 || fail "$line -> $first --help exited $?"
      fi
      checked=$((checked + 1))
      ;;
    build/pyref/bin/python)
      [ -e "${rest[1]}" ] || fail "$line -> ${rest[1]} does not exist"
      checked=$((checked + 1))
      ;;
    build/*)  # programs a GPU machine runs, e.g. build/release/tools/cuda_kernels_bench
      [ -e "${first/build\//$build/}" ] || [ -e "$build/tools/$(basename "$first")" ] ||
        echo "[readme_commands] note: $first is not built here (a GPU or bench build makes it)"
      checked=$((checked + 1))
      ;;
    cmake)
      if [ "${rest[1]}" = --install ]; then
        out=$(cmake --install "$build" --prefix "$work/prefix" 2>&1) || fail "$line -> exit $?: $(tail -n 2 <<<"$out")"
        "$work/prefix/bin/tarn" --version | grep -q '^tarn ' || fail "the installed tarn --version failed"
        [ -s "$work/prefix/share/tarn/recipes/small-delta-10min.yaml" ] || fail "the recipes were not installed"
        checked=$((checked + 1))
      fi
      ;;
    ctest) ;;  # run by this very suite
    *) echo "[readme_commands] note: not checked: $line" ;;
  esac
done <"$work/commands"

if [ "$failures" -gt 0 ]; then
  echo "[readme_commands] $failures of $checked commands failed"
  exit 1
fi
echo "[readme_commands] $checked commands of README.md check out"
