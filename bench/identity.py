"""Upstream identity on the request path (see bench/identity.sh). One sample server as an
upstream sent a static Authorization header, one sent a JWT mcpgate signs per caller
(`identity` mode = "jwt", an ES256 key made by openssl), and one sent the caller's OAuth
token exchanged at a real OpenID provider (oidc-provider, tests/peers/idp.mjs, with its
RFC 8693 grant; `identity` mode = "exchange", kept per caller token). Measured in
interleaved rounds, mcpgate's CPU per small tools/call: by one bearer token (static vs
jwt) and by one OAuth access token (static vs exchange). Prints a Markdown table and the
issue's two goals."""

import hashlib, json, os, shutil, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import free, measure_cpu, print_cpu_table, stop, wait_port  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18996, "MCPGATE": 18997, "IDP": 18998, "ADMIN": 18999}
PEERS = os.path.join(ROOT, "tests", "peers")
NODE = os.path.join(PEERS, "node_modules", "node", "bin", "node")
TOKEN = "bench-identity-token-0123456789abcdef"

CASES = [
    ("bearer token: static Authorization header", "/static", "bearer"),
    ("bearer token: identity = jwt (kept per caller)", "/signed", "bearer"),
    ("OAuth token: static Authorization header", "/oauth-static", "oauth"),
    ("OAuth token: identity = exchange (kept per caller token)", "/exchanged", "oauth"),
]


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-identity-bench-")
    procs = []
    results = {}
    try:
        if not os.path.exists(NODE):
            raise SystemExit("the test peers are not installed: run scripts/test.sh first (it installs oidc-provider)")
        issuer = f"http://127.0.0.1:{PORTS['IDP']}"
        procs.append(subprocess.Popen([NODE, os.path.join(PEERS, "idp.mjs"), str(PORTS["IDP"])], cwd=PEERS,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(
            [BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "20", "--result-bytes", "200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(PORTS["UPSTREAM"])
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-out", os.path.join(work, "identity.pem")], check=True)
        text = open(os.path.join(ROOT, "bench", "identity.toml.in")).read()
        wait_port(PORTS["IDP"])
        subs = dict(PORTS, WORK=work, ISSUER=issuer, TOKEN_SHA256=hashlib.sha256(TOKEN.encode()).hexdigest())
        for k, v in subs.items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = subprocess.Popen([BIN, "run", "-c", conf], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(work, "gate.log"), "w"))
        procs.append(gate)
        wait_port(PORTS["MCPGATE"])
        base = f"http://127.0.0.1:{PORTS['MCPGATE']}"
        for _ in range(100):
            with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['ADMIN']}/metrics") as r:
                if "mcpgate_oauth_signing_keys 3" in r.read().decode():
                    break
            time.sleep(0.1)
        else:
            raise SystemExit("mcpgate never got the provider's keys")
        claims = {"aud": f"{base}/mcp", "scope": "kb.read", "exp": int(time.time()) + 7200}
        sign = urllib.request.Request(f"{issuer}/test/sign", data=json.dumps({"alg": "ES256", "claims": claims}).encode(),
                                      headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(sign) as r:
            oauth_token = json.loads(r.read())["token"]
        bearer = {"bearer": f"Bearer {TOKEN}", "oauth": f"Bearer {oauth_token}"}
        for _ in range(ROUNDS):
            for case, path, who in CASES:
                env = {"BENCH_AUTHORIZATION": bearer[who]}
                measure_cpu(gate.pid, base + path, "call.lua", env, CONNECTIONS, results, case)
        with urllib.request.urlopen(f"{issuer}/test/counts") as r:
            exchanges = json.loads(r.read())["exchange"]
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    cpu, failed = print_cpu_table("Upstream identity", [c for c, _, _ in CASES], results, ROUNDS, CONNECTIONS, SMOKE)
    ratio = lambda a, b: cpu[CASES[b][0]] / cpu[CASES[a][0]]
    jwt, exchanged = ratio(0, 1), ratio(2, 3)
    print(f"\nGoal: a call with identity = jwt at most 1.10× the CPU of a static upstream header: {jwt:.3f} {'met' if jwt <= 1.10 else 'MISSED'}.")
    print(f"Goal: a call with an exchanged token kept at most 1.05× the CPU of a static upstream header: {exchanged:.3f} {'met' if exchanged <= 1.05 else 'MISSED'}.")
    print(f"Token exchanges the IdP made for the whole run: {exchanges} (one caller token).")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
