#!/usr/bin/env bash
# MCP 2026-07-28 on the request path: the same small tools/call as a modern request (no
# session; MCP-Protocol-Version, Mcp-Method, Mcp-Name and the _meta envelope), with its
# Mcp-Name base64-encoded, and inside a legacy session. Builds a release binary, then runs
# bench/modern.py.
#   bench/modern.sh            full run (about a minute); prints the table for docs/benchmarks.md
#   bench/modern.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" modern "$@"
