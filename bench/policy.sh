#!/usr/bin/env bash
# Policy beyond names: a call allowed by name against the same call also checked by an
# argument rule and annotation rules, on one mcpgate. Builds a release binary, then runs
# bench/policy.py.
#   bench/policy.sh            full run (about a minute); prints the table for docs/benchmarks.md
#   bench/policy.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" policy "$@"
