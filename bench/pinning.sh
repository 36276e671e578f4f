#!/usr/bin/env bash
# Pinning on the request path: a small tools/call and a 500-tool tools/list on an upstream
# with pin = "enforce" (every tool approved) and on the same server unpinned; CPU per
# request. Builds a release binary, then runs bench/pinning.py.
#   bench/pinning.sh            full run (about two minutes); prints the table for docs/benchmarks.md
#   bench/pinning.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" pinning "$@"
