#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is missing, builds tarn, extracts
# the built-in WordNet corpus, trains a SentencePiece model and the small BART with the gated
# delta rule in self-attention and position-aligned linear cross-attention on 512-token batches
# (recipes/small-delta-10min.yaml: linear time in every stack, no softmax) for a bounded
# time, reports test perplexity, exports the model and shows denoising examples.
#
#   tools/quickstart.sh                      10 minutes of training (resumes if run again)
#   TARN_MINUTES=30 tools/quickstart.sh      train longer
#   TARN_RECIPE=recipes/small-softmax.yaml tools/quickstart.sh
#   tools/quickstart.sh --restart            extra arguments go to `tarn train`
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${TARN_MINUTES:-10}
recipe=${TARN_RECIPE:-recipes/small-delta-10min.yaml}
name=$(basename "$recipe" .yaml)
run=runs/$name
build=build/release
tarn=$build/tools/tarn

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/6 setup"
bash tools/setup.sh

step "2/6 build ($build)"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target tarn

step "3/6 corpus (work/wordnet)"
if [ -s work/wordnet/train.txt ]; then
  echo "work/wordnet already prepared"
else
  "$tarn" prepare-corpus work/wordnet
fi

step "4/6 train $recipe for up to $minutes minutes (the tokenizer is trained first if missing)"
"$tarn" train "$recipe" --set training.max_time_minutes="$minutes" "$@"

step "5/6 test perplexity of the best checkpoint, and export"
ckpt=$run/best
[ -e "$ckpt" ] || ckpt=$run
"$tarn" eval --checkpoint "$ckpt" --data work/wordnet/test.txt 2>&1 | tee "$run/test_eval.log"
"$tarn" export --checkpoint "$ckpt" --out "$run/export"

step "6/6 denoising examples (input with <mask> spans, model output, original)"
"$tarn" denoise --checkpoint "$ckpt" --data work/wordnet/test.txt --count 5 --beam 4 --no-repeat-ngram 3

# What this machine reached, beside the README's figure for the reference machine (the same
# numbers as the main-job table under README.md's "Two commands": keep them in step).
ref_machine="AMD EPYC (Zen 3), 2 cores, OpenBLAS Zen kernels"
ref_steps=1306
ref_ppl=10.15
ref_rss_mib=712
ppl=$(sed -n 's/^ppl \([0-9.]*\)$/\1/p' "$run/test_eval.log" | tail -1)
steps=$(grep -o '"step":[0-9]*' "$run/metrics.jsonl" | tail -1 | cut -d: -f2)
rss=$(grep -o '"rss_peak_bytes":[0-9.e+]*' "$run/metrics.jsonl" | tail -1 | cut -d: -f2)
rss_mib=$(awk -v b="${rss:-0}" 'BEGIN { printf "%.0f", b / 1048576 }')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
printf '\nThis machine (%s, %s cores): test perplexity %s after %s steps, peak resident memory %s MiB.\n' \
  "${cpu:-unknown CPU}" "$(nproc)" "${ppl:-?}" "${steps:-?}" "$rss_mib"
printf 'Reference (%s, README.md): test perplexity %s after %s steps in 10 minutes, %s MiB.\n' \
  "$ref_machine" "$ref_ppl" "$ref_steps" "$ref_rss_mib"
printf 'Metrics: %s/metrics.jsonl; exported model: %s/export\n' "$run" "$run"

# The curves without TensorBoard (a failure there is a note: the run itself is done), and how
# to see the event files that tarn wrote into the run folder.
if curves_log=$(/usr/bin/python3 tools/plot_runs.py "$run" --out "$run/curves.png" 2>&1); then
  printf 'Curves: %s/curves.png (tools/plot_runs.py RUN... --out FILE draws several runs)\n' "$run"
else
  printf 'Curves: not drawn (%s)\n' "$(printf '%s\n' "$curves_log" | tail -1)"
fi
printf 'TensorBoard: build/pyref/bin/tensorboard --logdir runs   (then open http://localhost:6006)\n'
