#!/usr/bin/env bash
# tarn bench attention | train | decode at tiny sizes (ctest: cli_bench): each writes its CSV with
# the promised columns and a row per configuration, its JSON of the machine and its PNGs (where
# Debian's python3 has matplotlib, as tools/setup.sh installs it; else a warning); a size that
# cannot fit is refused up front (a "skipped" row, or exit 2 for decode); bad flags exit 2.
#   bench.sh <tarn> <recipe>
tag=bench
source "$(dirname "$0")/common.sh"

# header_is <csv> <header>: the CSV's first line is exactly the header.
header_is() {
  [ "$(head -n 1 "$1")" = "$2" ] || fail "$1: header $(head -n 1 "$1"), expected $2"
}
# rows <csv> <pattern>: how many data lines match the extended regex.
rows() { tail -n +2 "$1" | grep -cE "$2"; }

# pngs_drawn <dir> <name> <log>: the bench's PNGs are there, or (without matplotlib) its log says why not.
pngs_drawn() {
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    ls "$1/$2"_*.png >/dev/null 2>&1 || fail "$2: no PNG beside $2.csv: $(tail -n 3 "$3")"
  else
    grep -q "warning: no PNG" "$3" || fail "$2: no PNG and no warning saying why"
  fi
}

# attention: 2 lengths x (3 softmax + 3 linear algos x 2 maps + delta and gated + 2 windowed
# algos x 2 windows + routed flat and as a tree) = 34 rows, every one measured.
"$tarn" bench attention --n 32,64 --windows 8,64 --reps 1 --min-time 0 --out "$work/a" >"$work/a.log" 2>&1 ||
  fail "bench attention exited $?: $(tail -n 3 "$work/a.log")"
header_is "$work/a/attention.csv" \
  "device,algo,feature_map,N,batch,heads,head_dim,fwd_ms,fwdbwd_ms,fwd_peak_MiB,fwdbwd_peak_MiB,status"
[ "$(rows "$work/a/attention.csv" ',ok$')" = 34 ] || fail "attention.csv: expected 34 ok rows: $(cat "$work/a/attention.csv")"
[ "$(rows "$work/a/attention.csv" '^cpu,window_causal,w8,64,1,4,64,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,ok$')" = 1 ] ||
  fail "attention.csv: no complete window_causal w8 row at N=64"
[ "$(rows "$work/a/attention.csv" '^cpu,linear_causal,favor,64,1,4,64,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,ok$')" = 1 ] ||
  fail "attention.csv: no complete linear_causal favor row at N=64"
[ "$(rows "$work/a/attention.csv" '^cpu,delta_causal,-,64,1,4,64,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,ok$')" = 1 ] ||
  fail "attention.csv: no complete delta_causal row at N=64"
[ "$(rows "$work/a/attention.csv" '^cpu,routed_cross,-,64,1,4,64,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,ok$')" = 1 ] ||
  fail "attention.csv: no complete routed_cross row at N=64"
[ "$(rows "$work/a/attention.csv" '^cpu,routed_tree,-,64,1,4,64,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,ok$')" = 1 ] ||
  fail "attention.csv: no complete routed_tree row at N=64"
grep -q '"sgemm_gflops"' "$work/a/attention.json" || fail "attention.json lacks sgemm_gflops"
pngs_drawn "$work/a" attention "$work/a.log"

# A dense softmax over 2^20 positions needs terabytes: refused, the row kept with its reason.
"$tarn" bench attention --n 1048576 --algos softmax_dense --reps 1 --out "$work/big" >"$work/big.log" 2>&1 ||
  fail "bench attention at N=2^20 exited $?"
grep -qE '^cpu,softmax_dense,-,1048576,1,4,64,,,,,"skipped: needs [0-9.e+]+ GiB, limit' "$work/big/attention.csv" ||
  fail "the impossible size was not refused: $(cat "$work/big/attention.csv")"

# train: 2 kinds x 2 lengths in 2 rounds, and one size refused by --max-gib.
"$tarn" bench train "$recipe" --n 16,32 --steps 1 --rounds 2 --out "$work/t" >"$work/t.log" 2>&1 ||
  fail "bench train exited $?: $(tail -n 3 "$work/t.log")"
grep -q 'ms per step (median of 2 steps in 2 rounds; round medians' "$work/t.log" ||
  fail "bench train --rounds 2: no round summary in the log: $(tail -n 3 "$work/t.log")"
header_is "$work/t/train.csv" \
  "attention,precision,N,batch,tokens_per_batch,step_ms,tokens_per_s,alloc_peak_MiB,rss_peak_MiB,status"
[ "$(rows "$work/t/train.csv" '^(softmax|linear),f32,(16|32),[0-9]+,[0-9]+,[0-9.]+,[0-9]+,[0-9.]+,[0-9.]+,ok$')" = 4 ] ||
  fail "train.csv: expected 4 measured rows: $(cat "$work/t/train.csv")"
"$tarn" bench train "$recipe" --n 16 --attention linear --max-gib 0.001 --out "$work/t2" >"$work/t2.log" 2>&1 ||
  fail "bench train --max-gib exited $?"
grep -q '^linear,f32,16,.*"skipped: needs' "$work/t2/train.csv" || fail "train: --max-gib did not refuse: $(cat "$work/t2/train.csv")"
pngs_drawn "$work/t" train "$work/t.log"

# decode: 2 kinds x 4 points; the softmax cache grows with the position, linear state does not.
"$tarn" bench decode "$recipe" --positions 40 --points 4 --out "$work/d" >"$work/d.log" 2>&1 ||
  fail "bench decode exited $?: $(tail -n 3 "$work/d.log")"
header_is "$work/d/decode.csv" "attention,position,ms_per_token,state_MiB"
[ "$(rows "$work/d/decode.csv" '^(softmax|linear),(10|20|30|40),[0-9.]+,[0-9.]+$')" = 8 ] ||
  fail "decode.csv: expected 8 rows: $(cat "$work/d/decode.csv")"
state() { awk -F, -v a="$1" -v p="$2" '$1 == a && $2 == p { print $4 }' "$work/d/decode.csv"; }
awk -v a="$(state softmax 10)" -v b="$(state softmax 40)" 'BEGIN { exit !(b > a) }' ||
  fail "decode: the softmax cache did not grow from position 10 to 40"
[ "$(state linear 10)" = "$(state linear 40)" ] || fail "decode: the linear state changed size with the position"
pngs_drawn "$work/d" decode "$work/d.log"

# Refusals and bad flags: exit 2 and a message, before any work.
expect "decoding needs" "$tarn" bench decode "$recipe" --positions 100000 --attention softmax --max-gib 0.001
expect "--algos: \"flash\" is not one of" "$tarn" bench attention --algos flash
expect "--n: 0 is out of range" "$tarn" bench attention --n 0
expect "bench attention: unknown option --bogus" "$tarn" bench attention --bogus 1
expect "no CUDA device" "$tarn" bench attention --device cuda --n 32
expect "tarn bench: unknown command \"speed\"" "$tarn" bench speed
"$tarn" bench train --help | grep -q "usage: tarn bench train" || fail "bench train --help"

finish "all passed"
