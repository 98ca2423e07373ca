#!/usr/bin/env python3
"""Sequence-to-sequence tasks whose alignment is not the diagonal, built from the experiment's
WordNet glosses (issue 53): source<TAB>target pairs for `data.kind: pairs`.

  tasks.py --corpus work/wordnet --out work/tasks [--long-words 512] [--stages 64,128,256]

For each split (train, valid, test) of CORPUS and each task, writes OUT/<task>/<split>.tsv:
  reverse        target = the source's words in reverse order (a reordering)
  offset         target = the second half of the words, then the first half (an offset: target
                 position i needs source position i + n/2, or i - n/2)
  skip           target = every other word, the first, third, ... (length-changing: target
                 position i needs source position 2i)
  long-<task>    the same task on sources of consecutive glosses joined (in file order) until
                 each holds at least --long-words words (512: at least 512 SentencePiece tokens,
                 each word being one token or more), 4x small-hybrid's 128-position window
                 and past every window a recipe uses.
  long-<task>/w<W>   the same on sources of at least W words, for each W of --stages: the
                 length curriculum that the long tasks are trained through (tools/experiment.sh;
                 from scratch, not even softmax learns them in 2,400 steps).
Words are whitespace-separated; a gloss of one word is skipped (nothing to reorder). Every
output line is a pure function of the corpus, so a rerun writes the same files.
"""
import argparse
import os
import sys

TASKS = {
    "reverse": lambda w: w[::-1],
    "offset": lambda w: w[len(w) // 2:] + w[:len(w) // 2],
    "skip": lambda w: w[::2],
}


def sources(lines, long_words):
    if not long_words:
        yield from lines
        return
    group = []
    for words in lines:
        group.extend(words)
        if len(group) >= long_words:
            yield group
            group = []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="folder with train.txt, valid.txt, test.txt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--long-words", type=int, default=512)
    ap.add_argument("--stages", default="64,128,256", help="comma-separated source lengths in words")
    args = ap.parse_args()
    if args.long_words < 1:
        ap.error(f"--long-words {args.long_words}: expected a positive number")
    bad_stages = f"--stages {args.stages}: expected comma-separated positive numbers"
    try:
        stages = [int(w) for w in args.stages.split(",")] if args.stages else []
    except ValueError:
        ap.error(bad_stages)
    if any(w < 1 for w in stages):
        ap.error(bad_stages)
    for split in ("train", "valid", "test"):
        path = os.path.join(args.corpus, split + ".txt")
        if not os.path.isfile(path):
            print(f"tasks.py: {path}: missing (run tarn prepare-corpus {args.corpus})", file=sys.stderr)
            sys.exit(2)
        with open(path, encoding="utf-8") as f:
            lines = [line.split() for line in f]
        lines = [w for w in lines if len(w) >= 2]
        variants = [("", 0), ("long-", args.long_words)]
        variants += [("long-", w) for w in stages]
        for prefix, long_words in variants:
            for name, fn in TASKS.items():
                folder = os.path.join(args.out, prefix + name)
                if long_words and long_words != args.long_words:
                    folder = os.path.join(folder, f"w{long_words}")
                os.makedirs(folder, exist_ok=True)
                tmp = os.path.join(folder, split + ".tsv.part")
                with open(tmp, "w", encoding="utf-8") as out:
                    for words in sources(lines, long_words):
                        out.write(" ".join(words) + "\t" + " ".join(fn(words)) + "\n")
                os.replace(tmp, os.path.join(folder, split + ".tsv"))


if __name__ == "__main__":
    main()
