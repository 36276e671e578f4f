"""stdio bridges side by side (see bench/stdio.sh): supergateway (stateful: a process per
session), mcp-proxy (one process for all), and mcpgate in per_client and shared modes, each
bridging the same stdio server (`mcpgate sample-upstream --stdio`). For each: requests/s
and p50 of a small tools/call with 1 and 16 clients, each client in its own session
(bench/mcpload.rs), and memory per session. Prints Markdown tables."""

import json, os, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import rss_kib as rss_of, wait_port  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
SECONDS = 1 if SMOKE else int(os.environ.get("BENCH_DURATION", "5"))
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "3"))
SESSIONS = 4 if SMOKE else 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
LOAD = os.path.join(ROOT, os.environ.get("MCPLOAD_BIN", "target/release/examples/mcpload"))
BRIDGES = os.path.join(ROOT, "bench", ".bridges")
SERVER = [BIN, "sample-upstream", "--stdio"]
PORTS = {"supergateway": 18941, "mcp-proxy": 18942, "mcpgate": 18943}


def rss_kib(pid):
    try:
        return rss_of([pid])
    except FileNotFoundError:  # it exited meanwhile
        return 0


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = subprocess.run(["pgrep", "-P", str(p)], capture_output=True, text=True).stdout.split()
        for k in map(int, kids):
            out.append(k)
            todo.append(k)
    return out


def load(url, clients):
    out = subprocess.run([LOAD, url, str(clients), str(SECONDS)], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    work = tempfile.mkdtemp(prefix="mcpgate-stdio-bench-")
    gate_conf = os.path.join(work, "mcpgate.toml")
    open(gate_conf, "w").write(f"""
[[listen]]
name = "bench"
addr = "127.0.0.1:{PORTS['mcpgate']}"
[log]
format = "json"
level = "warn"
[upstreams.per_client]
command = {json.dumps(SERVER)}
max_processes = 64
[upstreams.shared]
command = {json.dumps(SERVER)}
sessions = "shared"
[profiles.per_client]
upstream = "per_client"
allow = ["*"]
[profiles.shared]
upstream = "shared"
allow = ["*"]
[[routes]]
listen = "bench"
path = "/mcp"
profile = "per_client"
auth = "none"
[[routes]]
listen = "bench"
path = "/shared"
profile = "shared"
auth = "none"
""")
    bridges = {
        "supergateway": ([os.path.join(BRIDGES, "node_modules", ".bin", "supergateway"), "--stdio", " ".join(SERVER),
                          "--outputTransport", "streamableHttp", "--stateful", "--port", str(PORTS["supergateway"]),
                          "--logLevel", "none"], f"http://127.0.0.1:{PORTS['supergateway']}/mcp"),
        "mcp-proxy": ([os.path.join(BRIDGES, "venv", "bin", "mcp-proxy"), "--host", "127.0.0.1", "--port",
                       str(PORTS["mcp-proxy"]), "--log-level", "WARNING", "--", *SERVER],
                      f"http://127.0.0.1:{PORTS['mcp-proxy']}/mcp"),
        "mcpgate per_client": ([BIN, "run", "-c", gate_conf], f"http://127.0.0.1:{PORTS['mcpgate']}/mcp"),
        "mcpgate shared": ([BIN, "run", "-c", gate_conf], f"http://127.0.0.1:{PORTS['mcpgate']}/shared"),
    }
    results, memory = {}, {}
    try:
        for rnd in range(ROUNDS):
            # The server alone over its pipes: what every bridge adds to.
            out = subprocess.run([LOAD, "--stdio", str(SECONDS), *SERVER], capture_output=True, text=True, check=True).stdout
            results.setdefault(("direct (pipes)", 1), []).append(json.loads(out.strip().splitlines()[-1]))
            for name, (cmd, url) in bridges.items():
                port = int(url.split(":")[2].split("/")[0])
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{name}.log"), "a"),
                                     start_new_session=True)
                try:
                    wait_port(port)
                    time.sleep(0.3)
                    if rnd == 0:
                        # Memory per session: the bridge's own RSS, and its processes'.
                        load(url, 1)
                        before = rss_kib(p.pid)
                        kids_before = set(descendants(p.pid))
                        subprocess.run([LOAD, url, str(SESSIONS), "0.5"], capture_output=True, check=True)
                        time.sleep(0.5)
                        after = rss_kib(p.pid)
                        new_kids = [k for k in descendants(p.pid) if k not in kids_before]
                        memory[name] = {
                            "own_kib_per_session": (after - before) / SESSIONS,
                            "processes_per_session": len(new_kids) / SESSIONS,
                            "child_kib_per_session": sum(rss_kib(k) for k in new_kids) / SESSIONS,
                        }
                    for clients in (1, 16):
                        results.setdefault((name, clients), []).append(load(url, clients))
                finally:
                    os.killpg(p.pid, signal.SIGTERM)
                    try:
                        p.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
                    time.sleep(0.3)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = lambda name, c, k: sorted(r[k] for r in results[(name, c)])[len(results[(name, c)]) // 2]
    if SMOKE:
        print("SMOKE RUN (one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## stdio bridges ({ROUNDS} interleaved rounds of {SECONDS} s per client count, medians; one session per client)\n")
    print("| bridge | clients | req/s | p50 ms | p99 ms | failed |")
    print("|---|---|---|---|---|---|")
    for (name, c) in results:
        print(f"| {name} | {c} | {med(name, c, 'rps'):.0f} | {med(name, c, 'p50_ms'):.3f} | {med(name, c, 'p99_ms'):.3f} | {sum(r['failed'] for r in results[(name, c)])} |")
    print(f"\n## Memory per session ({SESSIONS} sessions opened on a warm bridge)\n")
    print("| bridge | bridge's own RSS per session | processes per session | their RSS per session |")
    print("|---|---|---|---|")
    for name, m in memory.items():
        print(f"| {name} | {m['own_kib_per_session']:.0f} KiB | {m['processes_per_session']:.2f} | {m['child_kib_per_session']:.0f} KiB |")
    print("\n## Goals\n")
    print("| measure | goal | faster bridge | mcpgate | ratio | met |")
    print("|---|---|---|---|---|---|")
    base = med("direct (pipes)", 1, "p50_ms")
    for mode, peers in (("mcpgate per_client", ("supergateway", "mcp-proxy")), ("mcpgate shared", ("supergateway", "mcp-proxy"))):
        for c in (1, 16):
            best = max(peers, key=lambda b: med(b, c, "rps"))
            r = med(mode, c, "rps") / med(best, c, "rps")
            print(f"| {mode}, {c} client(s): req/s | ≥ 5× | {best} {med(best, c, 'rps'):.0f} | {med(mode, c, 'rps'):.0f} | {r:.1f}× | {'yes' if r >= 5 else 'no'} |")
            # Added over the server alone, over its pipes, one call at a time.
            added_b, added_g = med(best, c, "p50_ms") - base, med(mode, c, "p50_ms") - base
            p = added_g / added_b
            print(f"| {mode}, {c} client(s): added p50 | ≤ 0.2× | {best} {added_b:.3f} ms | {added_g:.3f} ms | {p:.2f} | {'yes' if p <= 0.2 else 'no'} |")
    own = memory["mcpgate per_client"]["own_kib_per_session"]
    child = memory["mcpgate per_client"]["child_kib_per_session"]
    print(f"| mcpgate per_client: own RSS per session | < 256 KiB, below the child's | - | {own:.0f} KiB (child {child:.0f} KiB) | - | {'yes' if own < 256 and own < child else 'no'} |")


if __name__ == "__main__":
    main()
