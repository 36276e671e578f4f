#!/usr/bin/env bash
# Policy beyond names: a call allowed by name against the same call also checked by an
# argument rule and annotation rules, on one mcpgate. Builds a release binary, then runs
# bench/policy.py.
#   bench/policy.sh            full run (about a minute); prints the table for docs/benchmarks.md
#   bench/policy.sh --smoke    one short round on a debug build: checks the harness works
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--smoke" ]; then
  cargo build --quiet --bin mcpgate
  export MCPGATE_BIN=target/debug/mcpgate
else
  cargo build --release --quiet --bin mcpgate
fi
exec python3 bench/policy.py "$@"
