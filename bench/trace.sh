#!/usr/bin/env bash
# Tracing: the same call through mcpgate with tracing off, on at sampling 1.0 (spans
# exported over OTLP/HTTP) and on at sampling 0. Builds a release binary, then runs
# bench/trace.py.
#   bench/trace.sh            full run (about a minute); prints the table for docs/benchmarks.md
#   bench/trace.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" trace "$@"
