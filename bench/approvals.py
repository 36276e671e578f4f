"""Approvals on the request path (see bench/approvals.sh). One sample server behind a
profile with `[[approvals]]` rules that the call matches none of, and behind one with no
rules. Measured in interleaved rounds, mcpgate's CPU per small tools/call on each. Prints a
Markdown table and the issue's goal."""

import os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18993, "MCPGATE": 18994, "ADMIN": 18995}

CASES = [
    ("tools/call, no approval rules", "/plain", "call.lua"),
    ("tools/call, rules it matches none of", "/ruled", "call.lua"),
]


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-approvals-bench-")
    procs = []
    results = {}
    try:
        procs.append(subprocess.Popen(
            [BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "20", "--result-bytes", "200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(PORTS["UPSTREAM"])
        text = open(os.path.join(ROOT, "bench", "approvals.toml.in")).read()
        for k, v in dict(PORTS, WORK=work).items():
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
                r = wrk(base + path, script, None, CONNECTIONS)
                r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
                results.setdefault(case, []).append(r)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## Approvals ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians)\n")
    print("| case | req/s | p50 ms | p99 ms | CPU µs/request | failed |")
    print("|---|---|---|---|---|---|")
    failed = 0
    for case, _, _ in CASES:
        n = sum(r["failed"] for r in results[case])
        failed += n
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {med(case, 'cpu_us_per_req'):.1f} | {n} |")
    ratio = lambda a, b: med(CASES[b][0], "cpu_us_per_req") / med(CASES[a][0], "cpu_us_per_req")
    call = ratio(0, 1)
    print(f"\nGoal: a call that matches no approval rule at most 1.02× the CPU of no rules configured: {call:.3f} {'met' if call <= 1.02 else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
