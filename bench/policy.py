"""Policy beyond names on the request path (see bench/policy.sh): the same small
tools/call through one mcpgate, on a route whose profile allows it by name, and on one
whose profile also checks an argument rule (a JSON pointer into the arguments, globs)
and annotation rules (the upstream's hints for the tool). Interleaved rounds; mcpgate's
CPU per call, medians, the ratio. Prints a Markdown table."""

import os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18961, "MCPGATE": 18962}
GOAL = 1.05
CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_001","arguments":{"id":"welcome"}}}'


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-policy-bench-")
    procs = []

    def start(args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{len(procs)}.log"), "w"))
        procs.append(p)
        return p

    results = {}
    try:
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "500", "--result-bytes", "200"])
        wait_port(PORTS["UPSTREAM"])
        text = open(os.path.join(ROOT, "bench", "policy.toml.in")).read()
        for k, v in dict(PORTS, WORK=work).items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = start([BIN, "run", "-c", conf])
        wait_port(PORTS["MCPGATE"])
        # The hints come with mcpgate's own read of the tool list at start.
        for _ in range(100):
            req = urllib.request.Request(f"http://127.0.0.1:{PORTS['MCPGATE']}/rules/mcp", data=CALL,
                                         headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
            with urllib.request.urlopen(req) as r:
                if b'"result"' in r.read():
                    break
            time.sleep(0.1)
        else:
            raise SystemExit("the rules route never let the call through")

        def measure(case, path):
            url = f"http://127.0.0.1:{PORTS['MCPGATE']}{path}"
            before = cpu_ticks([gate.pid])
            r = wrk(url, "call.lua", None, CONNECTIONS)
            r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
            results.setdefault(case, []).append(r)

        for _ in range(ROUNDS):
            measure("allowed by name", "/names/mcp")
            measure("by name + argument rule + annotations", "/rules/mcp")
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    base = med("allowed by name", "cpu_us_per_req")
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## Policy beyond names ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians)\n")
    print("| case | req/s | p50 ms | p99 ms | CPU µs/call | vs by name | failed |")
    print("|---|---|---|---|---|---|---|")
    failed = 0
    for case in results:
        n = sum(r["failed"] for r in results[case])
        failed += n
        cpu = med(case, "cpu_us_per_req")
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {cpu:.1f} | {cpu / base:.2f} | {n} |")
    ratio = med("by name + argument rule + annotations", "cpu_us_per_req") / base
    ok = ratio <= GOAL
    print(f"\nGoal: at most {GOAL}× the CPU of the call allowed by name: {ratio:.2f} {'met' if ok else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
