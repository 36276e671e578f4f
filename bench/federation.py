"""Federation on the request path (see bench/federation.sh). Two sample servers (A lists 20
tools, B lists 200), each alone on a profile and both behind one federated profile
(`prefix = "always"`). Measured in interleaved rounds, mcpgate's CPU per request:

- a small tools/call on A's profile, and the same call on the federated one (`a__tool_001`,
  renamed to `tool_001` on its way); and a call of a tool only B has (`tool_150`) on B's
  profile and on a federated profile that prefixes only shared names (it keeps its name);
- tools/list of A alone, of B alone, and of both merged;

and, with one connection (no queueing), the p50 latency of each list. Prints a Markdown
table and the issue's three goals."""

import os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
# BENCH_ONLY=call: only the call pair, for a longer look at the one goal.
CALLS_ONLY = os.environ.get("BENCH_ONLY") == "call"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM_A": 18981, "UPSTREAM_B": 18982, "MCPGATE": 18983}

CALL_ONE = "tools/call, one upstream"
CALL_FED = "tools/call, federated (renamed)"
CALL_B = "tools/call of B's tool_150, one upstream"
CALL_OWN = "tools/call of tool_150, federated (its own name)"
LIST_A = "tools/list, A alone (20 tools)"
LIST_B = "tools/list, B alone (200 tools)"
LIST_FED = "tools/list, A and B merged"


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-federation-bench-")
    procs = []

    def start(args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{len(procs)}.log"), "w"))
        procs.append(p)
        return p

    results, latency = {}, {}
    try:
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM_A']}", "--tools", "20", "--result-bytes", "200"])
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM_B']}", "--tools", "200", "--result-bytes", "200"])
        wait_port(PORTS["UPSTREAM_A"])
        wait_port(PORTS["UPSTREAM_B"])
        text = open(os.path.join(ROOT, "bench", "federation.toml.in")).read()
        for k, v in dict(PORTS, WORK=work).items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = start([BIN, "run", "-c", conf])
        wait_port(PORTS["MCPGATE"])
        base = f"http://127.0.0.1:{PORTS['MCPGATE']}"

        def measure(case, path, script, env=None):
            before = cpu_ticks([gate.pid])
            r = wrk(base + path, script, env, CONNECTIONS)
            r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
            results.setdefault(case, []).append(r)

        def quiet(case, path):
            latency.setdefault(case, []).append(wrk(base + path, "list.lua", None, 1)["p50"])

        for _ in range(ROUNDS):
            measure(CALL_ONE, "/a", "call.lua")
            measure(CALL_FED, "/both", "call.lua", {"BENCH_TOOL": "a__tool_001"})
            measure(CALL_B, "/b", "call.lua", {"BENCH_TOOL": "tool_150"})
            measure(CALL_OWN, "/shared", "call.lua", {"BENCH_TOOL": "tool_150"})
            if CALLS_ONLY:
                continue
            measure(LIST_A, "/a", "list.lua")
            measure(LIST_B, "/b", "list.lua")
            measure(LIST_FED, "/both", "list.lua")
            for case, path in ((LIST_A, "/a"), (LIST_B, "/b"), (LIST_FED, "/both")):
                quiet(case, path)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## Federation ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians; p50 alone: one connection)\n")
    print("| case | req/s | p50 ms | p99 ms | CPU µs/request | p50 ms alone | failed |")
    print("|---|---|---|---|---|---|---|")
    failed = 0
    for case in results:
        n = sum(r["failed"] for r in results[case])
        failed += n
        alone = f"{statistics.median(latency[case]):.3f}" if case in latency else "–"
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {med(case, 'cpu_us_per_req'):.1f} | {alone} | {n} |")
    call = med(CALL_FED, "cpu_us_per_req") / med(CALL_ONE, "cpu_us_per_req")
    own = med(CALL_OWN, "cpu_us_per_req") / med(CALL_B, "cpu_us_per_req")
    print(f"\nGoal: a federated call at most 1.05× the CPU of the same call on one upstream: renamed {call:.3f} {'met' if call <= 1.05 else 'MISSED'}; under its own name {own:.3f} {'met' if own <= 1.05 else 'MISSED'}.")
    if CALLS_ONLY:
        return
    lists = med(LIST_FED, "cpu_us_per_req") / (med(LIST_A, "cpu_us_per_req") + med(LIST_B, "cpu_us_per_req"))
    slower = max(statistics.median(latency[LIST_A]), statistics.median(latency[LIST_B]))
    added = statistics.median(latency[LIST_FED]) / slower
    print(f"Goal: a list of two members at most 1.2× the CPU of the two lists alone: {lists:.3f} {'met' if lists <= 1.2 else 'MISSED'}.")
    print(f"Goal: the merged list's p50 at most the slower member's + 10%: {added:.3f}× {'met' if added <= 1.1 else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
