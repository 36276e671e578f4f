#!/usr/bin/env bash
# Approvals on the request path: a small tools/call on a profile with [[approvals]] rules
# the call does not match, and on the same upstream with no rules; CPU per request.
# Builds a release binary, then runs bench/approvals.py.
#   bench/approvals.sh            full run (about a minute); prints the table for docs/benchmarks.md
#   bench/approvals.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" approvals "$@"
