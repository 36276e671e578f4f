#!/usr/bin/env bash
# Upstream identity on the request path: a small tools/call to an upstream that gets a JWT
# mcpgate signed for the caller (`identity` mode = "jwt"), and to the same server with a
# static Authorization header; CPU per request. Builds a release binary, then runs
# bench/identity.py.
#   bench/identity.sh            full run (about a minute); prints the table for docs/benchmarks.md
#   bench/identity.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" identity "$@"
