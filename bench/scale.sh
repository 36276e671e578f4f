#!/usr/bin/env bash
# Shared limits: the same gateway with its rate rules counted locally and in Redis (a real
# redis-server on loopback), latency at one connection, requests/s at 16, and the memory
# 100,000 distinct rate keys take. Builds a release binary, then runs bench/scale.py.
#   bench/scale.sh            full run (about two minutes); prints the table for docs/benchmarks.md
#   bench/scale.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" scale "$@"
