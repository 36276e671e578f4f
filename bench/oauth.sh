#!/usr/bin/env bash
# OAuth on the request path: a static bearer token against a JWT from a real OpenID
# provider, cached and first seen (RS256, ES256, EdDSA). Needs the test peers
# (scripts/test.sh installs them: oidc-provider and a Node 22); builds a release binary,
# then runs bench/oauth.py.
#   bench/oauth.sh            full run (about two minutes); prints the table for docs/benchmarks.md
#   bench/oauth.sh --smoke    one short round on a debug build: checks the harness works
exec "$(dirname "$0")/harness.sh" oauth "$@"
