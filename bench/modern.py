"""MCP 2026-07-28 on the request path (see bench/modern.sh): the same small tools/call
through one mcpgate as a modern request (plain Mcp-Name), as a modern request whose
Mcp-Name is base64-encoded, and inside a legacy session (one session for every
connection, as bench/call.lua sends it). Interleaved rounds; mcpgate's CPU per call,
medians, the ratios. Prints a Markdown table."""

import base64, json, os, shutil, statistics, subprocess, sys, tempfile, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18971, "MCPGATE": 18972}
SESSION = "legacy session"
PLAIN = "modern"
ENCODED = "modern, Mcp-Name base64"


def initialize(url):
    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(req) as r:
        session = r.headers.get("Mcp-Session-Id")
    if not session:
        raise SystemExit("initialize through mcpgate gave no session id")
    return session


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-modern-bench-")
    procs = []

    def start(args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{len(procs)}.log"), "w"))
        procs.append(p)
        return p

    results = {}
    try:
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "500", "--result-bytes", "200"])
        wait_port(PORTS["UPSTREAM"])
        text = open(os.path.join(ROOT, "bench", "modern.toml.in")).read()
        for k, v in dict(PORTS, WORK=work).items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = start([BIN, "run", "-c", conf])
        wait_port(PORTS["MCPGATE"])
        url = f"http://127.0.0.1:{PORTS['MCPGATE']}/mcp"
        session = initialize(url)
        encoded = "=?base64?" + base64.b64encode(b"tool_001").decode() + "?="

        def measure(case, script, env):
            before = cpu_ticks([gate.pid])
            r = wrk(url, script, env, CONNECTIONS)
            r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
            results.setdefault(case, []).append(r)

        for _ in range(ROUNDS):
            measure(SESSION, "call.lua", {"BENCH_SESSION": session})
            measure(PLAIN, "modern.lua", None)
            measure(ENCODED, "modern.lua", {"BENCH_NAME_HEADER": encoded})
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    base = med(SESSION, "cpu_us_per_req")
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## MCP 2026-07-28 calls ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians)\n")
    print("| case | req/s | p50 ms | p99 ms | CPU µs/call | vs legacy session | failed |")
    print("|---|---|---|---|---|---|---|")
    failed = 0
    for case in results:
        n = sum(r["failed"] for r in results[case])
        failed += n
        cpu = med(case, "cpu_us_per_req")
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {cpu:.1f} | {cpu / base:.2f} | {n} |")
    plain = med(PLAIN, "cpu_us_per_req")
    encoded = med(ENCODED, "cpu_us_per_req")
    ok_plain = plain <= base
    ok_encoded = encoded <= plain * 1.03
    print(f"\nGoal: a modern call at most the CPU of one in a legacy session: {plain / base:.2f} {'met' if ok_plain else 'MISSED'}.")
    print(f"Goal: with Mcp-Name base64-encoded, within 3% of plain: {encoded / plain:.3f} {'met' if ok_encoded else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
