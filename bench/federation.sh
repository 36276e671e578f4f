#!/usr/bin/env bash
# Federation on the request path: a small tools/call on one upstream's profile and on a
# federated profile over two (renamed on its way), and tools/list of each member alone
# and of both merged; CPU per request and the lists' p50 with one connection. Builds a
# release binary, then runs bench/federation.py.
#   bench/federation.sh            full run (about two minutes); prints the table for docs/benchmarks.md
#   bench/federation.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" federation "$@"
