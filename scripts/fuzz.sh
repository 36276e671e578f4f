#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (seconds, default 20), each from its
# checked-in corpus: the proxy's in fuzz/ and the wire crate's in crates/wire/fuzz/. New
# inputs go to a scratch folder, not into the corpus. A crash ends the run with an error
# and leaves its input under that folder's artifacts/. Needs a nightly toolchain and
# cargo-fuzz. Usage: scripts/fuzz.sh [SECONDS] [TARGET…]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
wanted=("$@")
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for dir in fuzz crates/wire/fuzz; do
  mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir "$dir")
  for t in "${targets[@]}"; do
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " =~ " $t " ]]; then
      continue
    fi
    mkdir -p "$scratch/$t"
    echo "fuzz: $dir $t for ${seconds}s"
    log="$scratch/$t.log"
    status=0
    cargo +nightly fuzz run --fuzz-dir "$dir" -O "$t" "$scratch/$t" "$dir/corpus/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|Test unit written)' "$log" || true
    if [ "$status" -ne 0 ]; then
      grep -E 'panicked at|^thread|^error' "$log" | head -5 >&2 || true
      echo "fuzz: $t found a crash or did not build (see $dir/artifacts/$t/)" >&2
      exit 1
    fi
  done
done
