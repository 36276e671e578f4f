#!/usr/bin/env bash
# stdio bridges side by side: supergateway (npm) and mcp-proxy (PyPI) against mcpgate, on
# the same stdio server. Installs the two bridges into bench/.bridges/ (pinned versions),
# builds release binaries, then runs bench/stdio.py.
#   bench/stdio.sh            full run (about five minutes); prints the tables for docs/benchmarks.md
#   bench/stdio.sh --smoke    one short round: checks the harness works
set -euo pipefail
cd "$(dirname "$0")/.."
bridges=bench/.bridges
if [ ! -x "$bridges/node_modules/.bin/supergateway" ]; then
  mkdir -p "$bridges"
  (cd "$bridges" && npm install --no-audit --no-fund --loglevel=error --no-save supergateway@4.0.0)
fi
if [ ! -x "$bridges/venv/bin/mcp-proxy" ]; then
  python3 -m venv "$bridges/venv"
  "$bridges/venv/bin/pip" install --quiet --disable-pip-version-check mcp-proxy==0.13.0
fi
if [ "${1:-}" = "--smoke" ]; then
  cargo build --quiet --bin mcpgate --example mcpload
  export MCPGATE_BIN=target/debug/mcpgate MCPLOAD_BIN=target/debug/examples/mcpload
else
  cargo build --release --quiet --bin mcpgate --example mcpload
fi
exec python3 bench/stdio.py "$@"
