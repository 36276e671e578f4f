"""The bridge between MCP's generations (see bench/bridge.sh).

1. CPU per call: the same small tools/call from a legacy client (in a session), passed
   through to a server that takes sessions (`/plain`), and bridged to the same server
   treated as 2026-07-28 (`/bridged`: initialize answered from server/discover, `_meta`
   spliced in, the session id a seal); and as a 2026-07-28 client sends it, unbridged.
   Interleaved rounds of wrk; mcpgate's CPU per call, medians, ratios.
2. Held calls: 1,000 calls of a legacy client that the SDK v2 fixture (modern only)
   answers `input_required`, each waiting on its stream for the client's answer: mcpgate's
   memory per held call (VmRSS before and after, connections included) and its CPU while
   they wait.
3. The other way: the same small tools/call of a 2026-07-28 client bridged to the sample
   server treated as a legacy one (`/old`: in a session mcpgate opened, the answer
   completed with `resultType`), against the legacy session's call passed through; and
   1,000 calls of 2026-07-28 clients held at the SDK v1 fixture (sessions only) between
   their `input_required` answer and their retry, each keeping its upstream stream open:
   mcpgate's memory per held call and its CPU while they wait.
Prints Markdown for docs/benchmarks.md."""

import asyncio, json, os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
HELD = 100 if SMOKE else int(os.environ.get("BENCH_HELD", "1000"))
# The keep-alive connections the 2026-07-28 calls to be held are sent over (such a call
# is answered at once; it holds no client connection while it waits).
MODERN_CONNECTIONS = 50
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
NODE = os.path.join(ROOT, "tests/peers/node_modules/node/bin/node")
PORTS = {"UPSTREAM": 18981, "ASKING": 18982, "MCPGATE": 18983, "OLD_ASKING": 18984}
PLAIN = "legacy session, passed through"
BRIDGED = "legacy session, bridged"
MODERN = "2026-07-28 client, unbridged"
TO_LEGACY = "2026-07-28 client, bridged to the server as legacy"
HELD_META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}'


def initialize(url):
    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "bench", "version": "1"}}}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(req) as r:
        session = r.headers.get("Mcp-Session-Id")
    if not session:
        raise SystemExit(f"initialize at {url} gave no session id")
    return session


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def request(session, body):
    return (f"POST /asking HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}").encode()


async def connect(port, session, n):
    """Opens `n` connections, each after a ping answered (kept alive, idle)."""
    ping = request(session, '{"jsonrpc":"2.0","id":0,"method":"ping"}')

    async def one():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(ping)
        seen = b""
        while b'"result"' not in seen:
            chunk = await asyncio.wait_for(r.read(4096), 30)
            if not chunk:
                raise SystemExit(f"a ping went unanswered: {seen[:300]!r}")
            seen += chunk
        return r, w

    conns = []
    for start in range(0, n, 100):
        conns += await asyncio.gather(*(one() for _ in range(min(100, n - start))))
    return conns


async def hold(conns, session):
    """On each connection, a call that is asked a question; returns once every question
    has arrived."""
    call = request(session, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_note","arguments":{"id":"n"}}}')

    async def one(r, w):
        w.write(call)
        seen = b""
        while b"elicitation/create" not in seen:
            chunk = await asyncio.wait_for(r.read(4096), 30)
            if not chunk:
                raise SystemExit(f"a held call ended early: {seen[:300]!r}")
            seen += chunk

    for start in range(0, len(conns), 100):
        await asyncio.gather(*(one(r, w) for r, w in conns[start:start + 100]))


async def answer(r):
    """One HTTP/1.1 answer with a Content-Length: its head and body."""
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await asyncio.wait_for(r.readexactly(length), 30)


def modern_request(method, params, name=None):
    body = f'{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{{params}{"," if params else ""}{HELD_META}}}}}'
    named = f"Mcp-Name: {name}\r\n" if name else ""
    return (f"POST /old-asking HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
            f"{named}Content-Length: {len(body)}\r\n\r\n{body}").encode()


async def connect_modern(port, k):
    """`k` keep-alive connections of 2026-07-28 clients, each after a `server/discover`
    answered (which opens mcpgate's session at the legacy server)."""
    async def one():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(modern_request("server/discover", ""))
        _, body = await answer(r)
        if b'"supportedVersions"' not in body:
            raise SystemExit(f"server/discover failed: {body[:300]!r}")
        return r, w
    return [await one() for _ in range(k)]


async def hold_modern(conns, n):
    """`n` calls of 2026-07-28 clients over `conns`, each answered `input_required` (the
    call then held at the legacy server, its upstream stream open)."""
    async def some(r, w, first, count):
        for i in range(first, first + count):
            w.write(modern_request("tools/call", f'"name":"delete_note","arguments":{{"id":"n{i}"}}', "delete_note"))
            _, body = await answer(r)
            if b'"input_required"' not in body:
                raise SystemExit(f"a 2026-07-28 call was not held: {body[:300]!r}")

    each = n // len(conns)
    await asyncio.gather(*(some(r, w, k * each, each) for k, (r, w) in enumerate(conns)))


def settle(pid, wait):
    """A second to settle, then `pid`'s VmRSS and its CPU ticks over `wait` seconds."""
    time.sleep(1)
    rss = rss_kib(pid)
    ticks = cpu_ticks([pid])
    time.sleep(wait)
    return rss, cpu_ticks([pid]) - ticks


def main():
    for name, port in PORTS.items():
        if not free(port):
            raise SystemExit(f"port {port} ({name}) is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-bridge-bench-")
    procs = []

    def start(args, cwd=None):
        p = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{len(procs)}.log"), "w"))
        procs.append(p)
        return p

    results = {}
    try:
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{PORTS['UPSTREAM']}", "--tools", "500", "--result-bytes", "200"])
        start([NODE, "ts2_server.mjs", "--port", str(PORTS["ASKING"]), "--legacy", "reject"], cwd=os.path.join(ROOT, "tests/peers"))
        start([NODE, "ts1_server.mjs", "--port", str(PORTS["OLD_ASKING"])], cwd=os.path.join(ROOT, "tests/peers"))
        wait_port(PORTS["UPSTREAM"])
        wait_port(PORTS["ASKING"])
        wait_port(PORTS["OLD_ASKING"])
        text = open(os.path.join(ROOT, "bench", "bridge.toml.in")).read()
        for k, v in dict(PORTS, WORK=work).items():
            text = text.replace(f"@{k}@", str(v))
        conf = os.path.join(work, "mcpgate.toml")
        open(conf, "w").write(text)
        gate = start([BIN, "run", "-c", conf])
        wait_port(PORTS["MCPGATE"])
        base = f"http://127.0.0.1:{PORTS['MCPGATE']}"
        plain = initialize(base + "/plain")
        bridged = initialize(base + "/bridged")

        def measure(case, path, script, env):
            before = cpu_ticks([gate.pid])
            r = wrk(base + path, script, env, CONNECTIONS)
            r["cpu_us_per_req"] = (cpu_ticks([gate.pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
            results.setdefault(case, []).append(r)

        for _ in range(ROUNDS):
            measure(PLAIN, "/plain", "call.lua", {"BENCH_SESSION": plain})
            measure(BRIDGED, "/bridged", "call.lua", {"BENCH_SESSION": bridged})
            measure(MODERN, "/bridged", "modern.lua", None)
            measure(TO_LEGACY, "/old", "modern.lua", None)

        # Held calls.
        asking = initialize(base + "/asking")
        time.sleep(1)
        rss_before = rss_kib(gate.pid)
        loop = asyncio.new_event_loop()
        held = loop.run_until_complete(connect(PORTS["MCPGATE"], asking, HELD))
        time.sleep(1)
        rss_idle = rss_kib(gate.pid)
        wait = 10
        ticks = cpu_ticks([gate.pid])
        time.sleep(wait)
        conn_ticks = cpu_ticks([gate.pid]) - ticks
        loop.run_until_complete(hold(held, asking))
        rss_held, idle_ticks = settle(gate.pid, wait)
        for _, w in held:
            w.close()
        # Held the other way: calls of 2026-07-28 clients waiting at a legacy server, on a
        # fresh mcpgate (memory the calls above freed would hide what these take).
        gate.terminate()
        gate.wait()
        gate = start([BIN, "run", "-c", conf])
        wait_port(PORTS["MCPGATE"])
        modern = loop.run_until_complete(connect_modern(PORTS["MCPGATE"], MODERN_CONNECTIONS))
        time.sleep(1)
        rss_modern_before = rss_kib(gate.pid)
        loop.run_until_complete(hold_modern(modern, HELD))
        rss_modern_held, modern_ticks = settle(gate.pid, wait)
        for _, w in modern:
            w.close()
        loop.close()
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    if SMOKE:
        print("SMOKE RUN (one short round, 100 held calls): this checks that the harness works; the figures mean nothing.\n")
    print(f"## The bridge ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians)\n")
    print(f"| case | req/s | p50 ms | p99 ms | CPU µs/call | vs passed through | failed |")
    print("|---|---|---|---|---|---|---|")
    ref = med(PLAIN, "cpu_us_per_req")
    failed = 0
    for case in results:
        n = sum(r["failed"] for r in results[case])
        failed += n
        cpu = med(case, "cpu_us_per_req")
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {cpu:.1f} | {cpu / ref:.2f} | {n} |")
    bridged_cpu = med(BRIDGED, "cpu_us_per_req")
    ok_cpu = bridged_cpu <= ref * 1.15
    per_conn = (rss_idle - rss_before) / HELD
    per_call = (rss_held - rss_idle) / HELD
    ok_mem = per_call <= 16
    cpu_ms = idle_ticks * 1000 / TICK
    print(f"\nHeld calls: {HELD}, each on a client connection opened first (a ping answered, kept alive). "
          f"mcpgate's VmRSS: {rss_before} KiB before, {rss_idle} KiB with the idle connections ({per_conn:.1f} KiB each), "
          f"{rss_held} KiB with a call held on each: {per_call:.1f} KiB per held call "
          f"(with the upstream connections opened for them). mcpgate's CPU over {wait} s: {conn_ticks * 1000 / TICK:.0f} ms with the connections idle, {cpu_ms:.0f} ms with the calls held.")
    print(f"\nGoal: a bridged call at most 1.15x the CPU of the same call passed through: {bridged_cpu / ref:.2f} {'met' if ok_cpu else 'MISSED'}.")
    print(f"Goal: a held call at most 16 KiB: {per_call:.1f} KiB {'met' if ok_mem else 'MISSED'}; no CPU while held: {cpu_ms:.0f} ms in {wait} s.")
    to_legacy_cpu = med(TO_LEGACY, "cpu_us_per_req")
    ok_to_legacy = to_legacy_cpu <= ref * 1.15
    per_modern = (rss_modern_held - rss_modern_before) / HELD
    modern_ms = modern_ticks * 1000 / TICK
    print(f"\nHeld the other way: {HELD} calls of 2026-07-28 clients answered `input_required` and held at the SDK v1 fixture, "
          f"each with its upstream stream open, sent over {MODERN_CONNECTIONS} keep-alive client connections opened first on a fresh mcpgate. "
          f"mcpgate's VmRSS: {rss_modern_before} KiB before, "
          f"{rss_modern_held} KiB with the calls held: {per_modern:.1f} KiB per held call. mcpgate's CPU over {wait} s while they wait: {modern_ms:.0f} ms.")
    print(f"\nGoal: a 2026-07-28 call bridged to a legacy server at most 1.15x the CPU of the same call passed through: {to_legacy_cpu / ref:.2f} {'met' if ok_to_legacy else 'MISSED'}.")
    print(f"Goal: a held 2026-07-28 call at most 16 KiB: {per_modern:.1f} KiB {'met' if per_modern <= 16 else 'MISSED'}; no CPU while held: {modern_ms:.0f} ms in {wait} s.")
    if failed:
        raise SystemExit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
