#!/usr/bin/env bash
# The bridge between MCP's generations, both ways: a legacy client's small tools/call
# passed through and bridged to a 2026-07-28 server, a 2026-07-28 client's bridged to a
# legacy one, and 1,000 bridged calls held each way waiting for the client's answer.
# Builds a release binary, then runs bench/bridge.py.
#   bench/bridge.sh            full run (about a minute and a half); prints the table for docs/benchmarks.md
#   bench/bridge.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" bridge "$@"
