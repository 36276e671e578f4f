"""Upstream identity on the request path (see bench/identity.sh). One sample server as an
upstream sent a JWT mcpgate signs per caller (`identity` mode = "jwt", an ES256 key made by
openssl) and as one sent a static Authorization header. Measured in interleaved rounds,
mcpgate's CPU per small tools/call on each, by one bearer token. Prints a Markdown table
and the issue's goal."""

import hashlib, os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18996, "MCPGATE": 18997}
TOKEN = "bench-identity-token-0123456789abcdef"

CASES = [
    ("tools/call, static Authorization header", "/static", "call.lua"),
    ("tools/call, identity = jwt (kept per caller)", "/signed", "call.lua"),
]


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-identity-bench-")
    procs = []
    results = {}
    try:
        procs.append(subprocess.Popen(
            [BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "20", "--result-bytes", "200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(PORTS["UPSTREAM"])
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-out", os.path.join(work, "identity.pem")], check=True)
        text = open(os.path.join(ROOT, "bench", "identity.toml.in")).read()
        subs = dict(PORTS, WORK=work, TOKEN_SHA256=hashlib.sha256(TOKEN.encode()).hexdigest())
        for k, v in subs.items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = subprocess.Popen([BIN, "run", "-c", conf], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(work, "gate.log"), "w"))
        procs.append(gate)
        wait_port(PORTS["MCPGATE"])
        base = f"http://127.0.0.1:{PORTS['MCPGATE']}"
        for _ in range(ROUNDS):
            for case, path, script in CASES:
                before = cpu_ticks([gate.pid])
                r = wrk(base + path, script, {"BENCH_AUTHORIZATION": f"Bearer {TOKEN}"}, CONNECTIONS)
                r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
                results.setdefault(case, []).append(r)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## Upstream identity ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians)\n")
    print("| case | req/s | p50 ms | p99 ms | CPU µs/request | failed |")
    print("|---|---|---|---|---|---|")
    failed = 0
    for case, _, _ in CASES:
        n = sum(r["failed"] for r in results[case])
        failed += n
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {med(case, 'cpu_us_per_req'):.1f} | {n} |")
    ratio = lambda a, b: med(CASES[b][0], "cpu_us_per_req") / med(CASES[a][0], "cpu_us_per_req")
    call = ratio(0, 1)
    print(f"\nGoal: a call with identity = jwt at most 1.10× the CPU of a static upstream header: {call:.3f} {'met' if call <= 1.10 else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
