"""Pinning on the request path (see bench/pinning.sh). One sample server listing 500
tools, as an upstream with `pin = "enforce"` (every tool approved first with `mcpgate pin
approve --all`) and as one without pinning. Measured in interleaved rounds, mcpgate's CPU
per request: a small tools/call and the 500-tool tools/list on each. Prints a Markdown
table and the issue's two goals."""

import os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import free, measure_cpu, print_cpu_table, stop, wait_port  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18991, "MCPGATE": 18992}

CASES = [
    ("tools/call, pin off", "/plain", "call.lua"),
    ("tools/call, pin = enforce", "/pinned", "call.lua"),
    ("tools/list (500 tools), pin off", "/plain", "list.lua"),
    ("tools/list (500 tools), pin = enforce", "/pinned", "list.lua"),
]


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-pinning-bench-")
    procs = []
    results = {}
    try:
        procs.append(subprocess.Popen(
            [BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "500", "--result-bytes", "200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(PORTS["UPSTREAM"])
        text = open(os.path.join(ROOT, "bench", "pinning.toml.in")).read()
        for k, v in dict(PORTS, WORK=work).items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        subprocess.run([BIN, "pin", "approve", "--all", "--upstream", "pinned", "-c", conf],
                       check=True, stdout=subprocess.DEVNULL)
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

    cpu, failed = print_cpu_table("Pinning", [c for c, _, _ in CASES], results, ROUNDS, CONNECTIONS, SMOKE)
    ratio = lambda a, b: cpu[CASES[b][0]] / cpu[CASES[a][0]]
    call, lists = ratio(0, 1), ratio(2, 3)
    print(f"\nGoal: a small tools/call with pin = enforce at most 1.02× the CPU of pinning off: {call:.3f} {'met' if call <= 1.02 else 'MISSED'}.")
    print(f"Goal: the 500-tool list with pin = enforce at most 1.10× the CPU of pinning off: {lists:.3f} {'met' if lists <= 1.10 else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
