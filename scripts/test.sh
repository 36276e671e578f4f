#!/usr/bin/env bash
# Runs mcpgate's whole test suite on a fresh machine: installs what the tests need, then
# runs every unit and end-to-end test. Usage: scripts/test.sh [extra nextest/cargo args]
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v curl >/dev/null 2>&1 || need_apt+=(curl)   # the demo test pastes curl commands
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install: ${need_apt[*]}" >&2
    exit 1
  fi
fi

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast "$@"
else
  cargo test --no-fail-fast "$@"
fi
