#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time (seconds, default 20), each
# from its checked-in corpus; new inputs go to a scratch folder, not into the corpus. A
# crash ends the run with an error and leaves its input under fuzz/artifacts/. Needs a
# nightly toolchain and cargo-fuzz. Usage: scripts/fuzz.sh [SECONDS] [TARGET…]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  echo "fuzz: $t for ${seconds}s"
  log="$scratch/$t.log"
  status=0
  cargo +nightly fuzz run -O "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|Test unit written)' "$log" || true
  if [ "$status" -ne 0 ]; then
    grep -E 'panicked at|^thread' "$log" | head -5 >&2 || true
    echo "fuzz: $t found a crash (see fuzz/artifacts/$t/)" >&2
    exit 1
  fi
done
