"""OAuth on the request path (see bench/oauth.sh): the same small tools/call through one
mcpgate, on a route with a static bearer token and on an oauth route with a JWT from a
real OpenID provider (oidc-provider, tests/peers/idp.mjs). Three cases of the JWT:
seen before (cached: a hash and a lookup), and first seen (the signature checked) for
RS256, ES256 and EdDSA. Interleaved rounds; mcpgate's CPU per call, medians, ratios to
the static token. Prints Markdown tables."""

import json, os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, rss_kib, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "3"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PEERS = os.path.join(ROOT, "tests", "peers")
NODE = os.path.join(PEERS, "node_modules", "node", "bin", "node")
TOKEN = "bench-token-0123456789abcdefghijklmnopqrstuvw"
PORTS = {"UPSTREAM": 18951, "IDP": 18952, "MCPGATE": 18953, "ADMIN": 18954}
# Distinct tokens per algorithm and round: each first-seen run uses each once.
FIRST_SEEN = 200 if SMOKE else 6000
ALGORITHMS = ("RS256", "ES256", "EdDSA")
GOAL_CACHED = 1.10


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    if not os.path.exists(NODE):
        raise SystemExit("the test peers are not installed: run scripts/test.sh first (it installs oidc-provider)")
    work = tempfile.mkdtemp(prefix="mcpgate-oauth-bench-")
    issuer = f"http://127.0.0.1:{PORTS['IDP']}"
    resource = f"http://127.0.0.1:{PORTS['MCPGATE']}/mcp"
    procs = []

    def start(args, **kw):
        log = open(os.path.join(work, f"{os.path.basename(args[0])}-{len(procs)}.log"), "w")
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, **kw)
        procs.append(p)
        return p

    results = {}
    try:
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "500", "--result-bytes", "200"])
        start([NODE, os.path.join(PEERS, "idp.mjs"), str(PORTS["IDP"])], cwd=PEERS)
        wait_port(PORTS["UPSTREAM"]); wait_port(PORTS["IDP"])
        token_hash = subprocess.run([BIN, "token", "hash"], input=TOKEN, capture_output=True, text=True, check=True).stdout.strip()
        text = open(os.path.join(ROOT, "bench", "oauth.toml.in")).read()
        for k, v in dict(PORTS, TOKEN_HASH=token_hash, ISSUER=issuer, WORK=work).items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = start([BIN, "run", "-c", conf])
        wait_port(PORTS["MCPGATE"])
        # The keys come with the start's fetch.
        for _ in range(100):
            with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['ADMIN']}/metrics") as r:
                if "mcpgate_oauth_signing_keys 3" in r.read().decode():
                    break
            time.sleep(0.1)
        else:
            raise SystemExit("mcpgate never got the provider's keys")

        exp = int(time.time()) + 7200
        claims = {"aud": resource, "scope": "kb.read", "exp": exp}
        cached = post_json(f"{issuer}/test/sign", {"alg": "ES256", "claims": claims})["token"]
        files = {}
        for rnd in range(ROUNDS):
            for alg in ALGORITHMS:
                tokens = post_json(f"{issuer}/test/sign", {"alg": alg, "count": FIRST_SEEN, "claims": claims})["tokens"]
                path = os.path.join(work, f"{alg}-{rnd}.tokens")
                open(path, "w").write("\n".join(tokens) + "\n")
                files[(alg, rnd)] = path
        token_bytes = {"static": len(TOKEN), "ES256 (cached)": len(cached)}

        def measure(case, path, script, env):
            url = f"http://127.0.0.1:{PORTS['MCPGATE']}{path}"
            before = cpu_ticks([gate.pid])
            r = wrk(url, script, env, CONNECTIONS)
            r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
            results.setdefault(case, []).append(r)

        for rnd in range(ROUNDS):
            measure("static bearer token", "/bearer/mcp", "call.lua", {"BENCH_AUTHORIZATION": f"Bearer {TOKEN}"})
            measure("JWT, seen before (cached)", "/mcp", "call.lua", {"BENCH_AUTHORIZATION": f"Bearer {cached}"})
            for alg in ALGORITHMS:
                measure(f"JWT first seen, {alg}", "/mcp", "tokens.lua", {"BENCH_TOKENS": files[(alg, rnd)], "BENCH_THREADS": "2"})
        rss = rss_kib([gate.pid])
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    base = med("static bearer token", "cpu_us_per_req")
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## OAuth ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians; first-seen runs: {FIRST_SEEN} tokens each, each used once)\n")
    print("| case | requests | req/s | p50 ms | p99 ms | CPU µs/call | vs static token | failed |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for case in results:
        n = sum(r["failed"] for r in results[case])
        failed += n
        cpu = med(case, "cpu_us_per_req")
        print(f"| {case} | {med(case, 'requests'):.0f} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {cpu:.1f} | {cpu / base:.2f} | {n} |")
    ratio = med("JWT, seen before (cached)", "cpu_us_per_req") / base
    ok = ratio <= GOAL_CACHED
    print(f"\nGoal: a cached JWT costs at most {GOAL_CACHED}× the CPU of a static token: {ratio:.2f} {'met' if ok else 'MISSED'}.")
    print(f"Token sizes: {token_bytes}. mcpgate RSS at the end: {rss} KiB.")
    if failed:
        raise SystemExit(f"{failed} requests failed")
    if not ok and not SMOKE:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
