#!/usr/bin/env bash
# Runs mcpgate's whole test suite on a fresh machine: installs what the tests need, then
# runs every unit and end-to-end test. Usage: scripts/test.sh [extra nextest/cargo args]
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v curl >/dev/null 2>&1 || need_apt+=(curl)        # the demo test pastes curl commands
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)  # the benchmark smoke makes its https upstream's certificate
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)   # installs the MCP peers
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)  # shared rate limits (tests/shared_limits.rs, the script test in src/runtime/store.rs)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)          # renders the status page (tests/observability.rs)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)        # checks the alert rules and /metrics (same)
command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)                 # a trusted proxy in front (tests/limits.rs), and the benchmarks' baseline
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install: ${need_apt[*]}" >&2
    exit 1
  fi
fi

# Real MCP peers for the end-to-end tests, into tests/peers/: the reference server, the
# TypeScript SDK, the Inspector CLI, the conformance suite, oidc-provider (the OAuth tests'
# identity provider) and a Node 22 runtime (npm), and the Python SDK (a venv). Reinstalled when their pinned versions change.
peers=tests/peers
if [ ! -x "$peers/node_modules/node/bin/node" ] || ! cmp -s "$peers/package-lock.json" "$peers/node_modules/.installed-lock.json"; then
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$peers/package-lock.json" "$peers/node_modules/.installed-lock.json"
fi
if [ ! -x "$peers/.venv/bin/python" ] || ! cmp -s "$peers/requirements.txt" "$peers/.venv/.installed-requirements.txt"; then
  python3 -m venv "$peers/.venv"
  "$peers/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$peers/requirements.txt"
  cp "$peers/requirements.txt" "$peers/.venv/.installed-requirements.txt"
fi

# The benchmark harness (mcpgate vs nginx vs direct) must keep working: one short round
# with a debug build checks it runs, not timings. It goes first so the test runner's
# summary is the last thing printed. Skipped when the tests were filtered (arguments given).
if [ $# -eq 0 ]; then
  bench/run.sh --smoke
  bench/stdio.sh --smoke
  bench/oauth.sh --smoke
  bench/policy.sh --smoke
  bench/scale.sh --smoke
  bench/trace.sh --smoke
  bench/federation.sh --smoke
  bench/pinning.sh --smoke
  bench/approvals.sh --smoke
  bench/identity.sh --smoke
fi

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
