"""Shared limits (see bench/scale.sh): one upstream behind two mcpgate processes with the
same rate rules, counted in the process ("local") or in a real redis-server on loopback
("redis"). Interleaved rounds of a small tools/call: p50 at one connection (what the
round trip to Redis adds), requests/s and CPU at 16. Then 100,000 calls with a tool name
each never used before (a rate key each) against each gateway, and their RSS before
and after. Prints a Markdown table."""

import hashlib, os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, TOKEN, cpu_ticks, free, rss_kib, wait_port, wrk, wrk_result, wrk_start, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "3"))
KEYS = 3_000 if SMOKE else 100_000
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
PORTS = {"UPSTREAM": 18971, "LOCAL": 18972, "LOCAL_ADMIN": 18973, "REDIS_GW": 18974, "REDIS_GW_ADMIN": 18975, "REDIS": 18976}
ADDED_P50_MS = 0.150
RPS_RATIO = 0.7
AUTH = {"BENCH_AUTHORIZATION": f"Bearer {TOKEN}"}


def main():
    if shutil.which("redis-server") is None:
        raise SystemExit("bench/scale.py needs redis-server (Debian's package redis-server)")
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-scale-bench-")
    procs = []

    def start(args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{len(procs)}.log"), "w"))
        procs.append(p)
        return p

    def redis_cli(*args):
        return subprocess.run(["redis-cli", "-p", str(PORTS["REDIS"]), *args], capture_output=True, text=True, check=True).stdout.strip()

    results, memory = {}, {}
    try:
        redis = start(["redis-server", "--bind", "127.0.0.1", "--port", str(PORTS["REDIS"]), "--save", "", "--appendonly", "no", "--dir", work])
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "500", "--result-bytes", "200"])
        wait_port(PORTS["REDIS"])
        wait_port(PORTS["UPSTREAM"])
        template = open(os.path.join(ROOT, "bench", "scale.toml.in")).read()
        gates = {}
        for case, port, admin, store in [
            ("local", PORTS["LOCAL"], PORTS["LOCAL_ADMIN"], ""),
            ("redis", PORTS["REDIS_GW"], PORTS["REDIS_GW_ADMIN"], f'[limits.store]\nredis = "redis://127.0.0.1:{PORTS["REDIS"]}/0"'),
        ]:
            text = template
            for k, v in dict(UPSTREAM=PORTS["UPSTREAM"], MCPGATE=port, ADMIN=admin, STORE=store,
                             TOKEN_SHA256=hashlib.sha256(TOKEN.encode()).hexdigest()).items():
                text = text.replace(f"@{k}@", str(v))
            conf = os.path.join(work, f"{case}.toml")
            open(conf, "w").write(text)
            gates[case] = (start([BIN, "run", "-c", conf]), f"http://127.0.0.1:{port}/mcp", admin)
            wait_port(port)
        # The store connects on its own task: wait until it says it is up.
        for _ in range(100):
            with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['REDIS_GW_ADMIN']}/metrics") as r:
                if b"mcpgate_limit_store_up 1" in r.read():
                    break
            time.sleep(0.1)
        else:
            raise SystemExit("the redis gateway never connected to redis-server")
        def evalsha_calls():
            stats = redis_cli("INFO", "commandstats")
            return int(stats.split("cmdstat_evalsha:calls=")[1].split(",")[0]) if "cmdstat_evalsha:" in stats else 0

        before_evals = evalsha_calls()

        def measure(case, connections, label):
            proc, url, _ = gates[case]
            before = cpu_ticks([proc.pid])
            before_redis = cpu_ticks([redis.pid])
            r = wrk(url, "call.lua", AUTH, connections)
            r["cpu_us_per_req"] = (cpu_ticks([proc.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
            r["redis_us_per_req"] = (cpu_ticks([redis.pid]) - before_redis) * 1e6 / TICK / max(r["requests"], 1)
            results.setdefault((case, label), []).append(r)

        for _ in range(ROUNDS):
            for case in ["local", "redis"]:
                measure(case, 1, "1 connection")
            for case in ["local", "redis"]:
                measure(case, CONNECTIONS, f"{CONNECTIONS} connections")
        evals = evalsha_calls() - before_evals
        timed = sum(r["requests"] for (case, _), rs in results.items() if case == "redis" for r in rs)

        # Memory: KEYS calls, each a new rate key (token+tool with a new tool name).
        for case in ["local", "redis"]:
            proc, url, _ = gates[case]
            rss_before = rss_kib([proc.pid])
            sent, offset = 0, 0
            while sent < KEYS:
                out = wrk_start(url, "keys.lua", dict(AUTH, BENCH_OFFSET=str(offset)), CONNECTIONS, duration=1 if SMOKE else 3).communicate()[0]
                sent += wrk_result(url, out)["requests"]
                offset += 10_000_000
            memory[case] = {"calls": sent, "before": rss_before, "after": rss_kib([proc.pid])}
            if case == "redis":
                memory[case]["redis_keys"] = int(redis_cli("DBSIZE"))
    finally:
        stop(procs)
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)

    med = lambda key, k: statistics.median(r[k] for r in results[key])
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## Shared limits ({ROUNDS} interleaved rounds, wrk -t2, medians; rules: token + global, both never refusing)\n")
    print("| rate rules counted | connections | req/s | p50 ms | p99 ms | mcpgate CPU µs/call | redis-server CPU µs/call | failed |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for (case, label) in results:
        n = sum(r["failed"] for r in results[(case, label)])
        failed += n
        redis_cpu = f"{med((case, label), 'redis_us_per_req'):.1f}" if case == "redis" else "–"
        print(f"| {case} | {label} | {med((case, label), 'rps'):.0f} | {med((case, label), 'p50'):.3f} | {med((case, label), 'p99'):.3f} "
              f"| {med((case, label), 'cpu_us_per_req'):.1f} | {redis_cpu} | {n} |")
    added = med(("redis", "1 connection"), "p50") - med(("local", "1 connection"), "p50")
    many = f"{CONNECTIONS} connections"
    ratio = med(("redis", many), "rps") / med(("local", many), "rps")
    print(f"\nEVALSHA calls seen by redis-server: {evals} for {timed} timed requests (wrk does not count the calls in flight when it stops).\n")
    print(f"Goal: the Redis path adds at most {ADDED_P50_MS * 1000:.0f} µs at p50 (one connection): {added * 1000:.0f} µs {'met' if added <= ADDED_P50_MS else 'MISSED'}.")
    print(f"Goal: requests/s with Redis at least {RPS_RATIO}× without ({CONNECTIONS} connections): {ratio:.2f} {'met' if ratio >= RPS_RATIO else 'MISSED'}.\n")
    print(f"| {KEYS:,} new rate keys | calls | RSS before MiB | RSS after MiB | growth MiB | keys in Redis after |")
    print("|---|---|---|---|---|---|")
    for case, m in memory.items():
        print(f"| {case} | {m['calls']} | {m['before'] / 1024:.1f} | {m['after'] / 1024:.1f} | {(m['after'] - m['before']) / 1024:+.1f} | {m.get('redis_keys', '–')} |")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
