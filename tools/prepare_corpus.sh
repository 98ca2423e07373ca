#!/usr/bin/env bash
# Extracts tarn's built-in corpus (WordNet 3.0 definitions and example sentences, Debian
# package wordnet-base) into OUTDIR/{train,valid,test}.txt, one sentence per line,
# de-duplicated, split 98/1/1 by a hash of the line. Deterministic: the same files every run.
#
#   tools/prepare_corpus.sh OUTDIR [WORDNET_DIR]      (WORDNET_DIR defaults to /usr/share/wordnet)
#
# The work is tarn::prepare_wordnet_corpus (data/wordnet_corpus.cpp); this script compiles it
# into a one-off program so that it needs no build tree (a few seconds).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTDIR [WORDNET_DIR]" >&2
  exit 2
fi
out=$1
wordnet=${2:-/usr/share/wordnet}
root=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -f "$wordnet/data.noun" ]; then
  echo "prepare_corpus: $wordnet/data.noun not found: install wordnet-base (tools/setup.sh)" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/main.cpp" <<'CPP'
#include <iostream>

#include "data/wordnet_corpus.h"
#include "kernels/check.h"

int main(int argc, char** argv) {
  try {
    std::cout << tarn::prepare_wordnet_corpus(argv[1], argv[2]).summary();
    return 0;
  } catch (const tarn::Error& e) {
    std::cerr << "prepare_corpus: " << e.what() << "\n";
    return 2;
  }
}
CPP
"${CXX:-g++}" -std=c++17 -O2 -I"$root" "$tmp/main.cpp" "$root/data/wordnet_corpus.cpp" \
  "$root/data/line_reader.cpp" "$root/data/utf8.cpp" -o "$tmp/prepare_corpus"
"$tmp/prepare_corpus" "$out" "$wordnet"
