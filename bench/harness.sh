#!/usr/bin/env bash
# Runs one of the comparison harnesses, bench/NAME.py, on a mcpgate binary built for it:
# a release build for a full run, a debug build with --smoke (one short round that checks
# the harness works; its figures mean nothing). Usage: bench/harness.sh NAME [--smoke]
set -euo pipefail
cd "$(dirname "$0")/.."
name="$1"
shift
if [ "${1:-}" = "--smoke" ]; then
  cargo build --quiet --bin mcpgate
  export MCPGATE_BIN=target/debug/mcpgate
else
  cargo build --release --quiet --bin mcpgate
fi
exec python3 "bench/$name.py" "$@"
