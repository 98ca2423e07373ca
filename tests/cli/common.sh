# Sourced by the command-line tests, run as `<test>.sh <tarn> <recipe>` with $tag set first:
# $tarn and $recipe from the arguments, a scratch folder $work removed at exit, and the checks.
set -uo pipefail
tarn=$1 recipe=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# fail <what went wrong>: reports one failure and counts it.
fail() {
  echo "[$tag] FAIL: $*"
  failures=$((failures + 1))
}

# expect <message> <command...>: the command must exit 2 within $expect_seconds (default 60)
# with the message in its output (a refusal before any real work).
expect() {
  local message=$1 out status
  shift
  out=$(timeout "${expect_seconds:-60}" "$@" 2>&1 </dev/null)
  status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "$message" <<<"$out"; then
    fail "$* -> exit $status, expected 2 with: $message; got: $(tail -n 3 <<<"$out")"
  else
    echo "[$tag] ok: $*"
  fi
}

# finish <summary>: exit 1 if anything failed, else print the summary and exit 0.
finish() {
  if [ "$failures" -gt 0 ]; then
    echo "[$tag] $failures failure(s)"
    exit 1
  fi
  echo "[$tag] $1"
  exit 0
}
