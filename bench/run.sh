#!/usr/bin/env bash
# mcpgate vs nginx vs direct, same upstream, same load, one run. Builds release binaries,
# installs nginx and wrk from Debian's packages if missing, then runs bench/run.py.
#   bench/run.sh            full run (a few minutes); prints the table for docs/benchmarks.md
#   bench/run.sh --smoke    one short round of each scenario: checks the harness works
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null || ! command -v openssl >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq nginx wrk openssl >/dev/null
  else
    echo "bench/run.sh: please install nginx, wrk and openssl" >&2
    exit 1
  fi
fi
if [ "${1:-}" = "--smoke" ]; then
  # The smoke checks the harness works, not timings: a debug build is enough.
  cargo build --quiet --bin mcpgate
  export MCPGATE_BIN=target/debug/mcpgate
else
  cargo build --release --quiet --bin mcpgate
fi
exec python3 bench/run.py "$@"
