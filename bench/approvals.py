"""Approvals on the request path (see bench/approvals.sh). One sample server behind a
profile with `[[approvals]]` rules that the call matches none of, and behind one with no
rules. Measured in interleaved rounds, mcpgate's CPU per small tools/call on each. Prints a
Markdown table and the issue's goal."""

import os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import free, measure_cpu, print_cpu_table, stop, wait_port  # the main harness's helpers

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
                measure_cpu(gate.pid, base + path, script, None, CONNECTIONS, results, case)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    cpu, failed = print_cpu_table("Approvals", [c for c, _, _ in CASES], results, ROUNDS, CONNECTIONS, SMOKE)
    call = cpu[CASES[1][0]] / cpu[CASES[0][0]]
    print(f"\nGoal: a call that matches no approval rule at most 1.02× the CPU of no rules configured: {call:.3f} {'met' if call <= 1.02 else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
