#!/usr/bin/env bash
# Fuzzes tarn's input loaders with libFuzzer (fuzz/README.md): configures a clang build in
# build/fuzz (TARN_FUZZ=ON, CPU only), builds the fuzzers and runs each for a while, one after
# the other, one process each.
set -euo pipefail

all_targets=(recipe corpus safetensors checkpoint bpe_tokenizer hf_config)

usage() {
  cat <<USAGE
usage: tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]

Builds the libFuzzer targets with clang (ASan + UBSan) in build/fuzz and fuzzes each TARGET
for SECONDS_PER_TARGET seconds (default 60), one at a time, in a single process each.
Targets: ${all_targets[*]} (default: all).

  recipe       framework/config: parse_recipe over arbitrary YAML and --set overrides
  corpus       data/: plain-text lines, source<TAB>target pairs, WordNet data files
  safetensors  framework/io/safetensors.cpp: check_safetensors and load_safetensors
  checkpoint   framework/io/checkpoint_dir.cpp (MANIFEST.json, COMPLETE), progress.json
  bpe_tokenizer  data/byte_level_bpe.cpp: tokenizer.json, vocab.json + merges.txt, encode/decode
  hf_config    app/hf_config.cpp: tarn import's config.json / generation_config.json, its recipe

Each target keeps a growing corpus in build/fuzz/corpus-TARGET (seeded from
fuzz/corpus/TARGET, which is only read). A finding is a crash, an ASan/UBSan report, an
exception other than tarn::Error, an input running over 10 s, or memory over 2048 MB; its
input is saved under build/fuzz/findings-TARGET/ and the run's log as
build/fuzz/findings-TARGET/last-run.log. Exits 1 when any target found something.

Environment: TARN_JOBS (build parallelism, default: all cores).
USAGE
}

seconds=60
if [ $# -gt 0 ]; then
  case $1 in
    -h|--help) usage; exit 0 ;;
    ''|*[!0-9]*) ;;
    *) seconds=$1; shift ;;
  esac
fi
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  if [[ " ${all_targets[*]} " != *" $t "* ]]; then
    echo "tools/fuzz.sh: unknown target '$t' (targets: ${all_targets[*]})" >&2
    exit 2
  fi
done
for tool in clang clang++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "tools/fuzz.sh: $tool not found: run tools/setup.sh" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
root=$(pwd)
dir=build/fuzz
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$dir" "${launcher[@]}" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTARN_FUZZ=ON -DTARN_CUDA=OFF -DTARN_BUILD_TESTS=OFF \
  -DTARN_BUILD_BENCH=OFF >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("${t}_fuzzer"); done
cmake --build "$dir" -j"${TARN_JOBS:-$(nproc)}" --target "${build_targets[@]}"

found=()
for t in "${targets[@]}"; do
  if ! bash fuzz/run_fuzzer.sh "$dir/fuzz/${t}_fuzzer" "$seconds" "$dir/corpus-$t" fuzz/corpus/"$t" \
      "$dir/findings-$t"; then
    found+=("$t")
  fi
done
if [ ${#found[@]} -gt 0 ]; then
  echo "[fuzz] findings in: ${found[*]} (inputs under $dir/findings-<target>/)"
  exit 1
fi
echo "[fuzz] no findings (${#targets[@]} targets, ${seconds} s each)"
