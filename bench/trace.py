"""The cost of tracing (see bench/trace.sh): the same small tools/call through three
mcpgate processes on one upstream: tracing off, tracing on with sampling 1.0 (every call
a span, exported over OTLP/HTTP to a sink in this script that reads each export and
answers 200), and tracing on with sampling 0 (trace context passed on, nothing
exported). Interleaved rounds; each process's CPU per call, medians, ratios to off.
Prints a Markdown table."""

import http.server, os, re, shutil, statistics, subprocess, sys, tempfile, threading, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import TICK, cpu_ticks, free, wait_port, wrk, stop  # the main harness's helpers

SMOKE = "--smoke" in sys.argv
ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("MCPGATE_BIN", "target/release/mcpgate"))
UPSTREAM, SINK = 18971, 18972
CASES = {  # name: (port, admin port, [telemetry] body)
    "tracing off": (18973, 18974, ""),
    "tracing on, sampling 1.0": (18975, 18976, "[telemetry]\notlp = \"http://127.0.0.1:@SINK@\"\nsampling = 1.0\n"),
    "tracing on, sampling 0": (18977, 18978, "[telemetry]\notlp = \"http://127.0.0.1:@SINK@\"\nsampling = 0.0\n"),
}
GOAL_ON = 1.15


class Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that takes every export and keeps only counts."""
    exports = 0
    bytes = 0

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        Sink.exports += 1
        Sink.bytes += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def spans(admin):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics").read().decode()
    out = {}
    for result in ("exported", "dropped", "failed"):
        m = re.search(r'mcpgate_trace_spans_total\{result="%s"\} (\d+)' % result, text)
        out[result] = int(m.group(1)) if m else 0
    return out


def main():
    ports = [UPSTREAM, SINK] + [p for c in CASES.values() for p in c[:2]]
    for port in ports:
        if not free(port):
            raise SystemExit(f"port {port} is in use")
    work = tempfile.mkdtemp(prefix="mcpgate-trace-bench-")
    procs, gates, results = [], {}, {}
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", SINK), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()

    def start(args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{len(procs)}.log"), "w"))
        procs.append(p)
        return p

    try:
        start([BIN, "sample-upstream", "--listen", f"127.0.0.1:{UPSTREAM}", "--tools", "500", "--result-bytes", "200"])
        wait_port(UPSTREAM)
        template = open(os.path.join(ROOT, "bench", "trace.toml.in")).read()
        for case, (port, admin, telemetry) in CASES.items():
            text = template.replace("@TELEMETRY@", telemetry)
            for k, v in dict(PORT=port, ADMIN=admin, UPSTREAM=UPSTREAM, SINK=SINK, WORK=work).items():
                text = text.replace(f"@{k}@", str(v))
            conf = os.path.join(work, f"{port}.toml")
            open(conf, "w").write(text)
            gates[case] = start([BIN, "run", "-c", conf])
            wait_port(port)

        for _ in range(ROUNDS):
            for case, (port, _, _) in CASES.items():
                pid = gates[case].pid
                before = cpu_ticks([pid])
                r = wrk(f"http://127.0.0.1:{port}/mcp", "call.lua", None, CONNECTIONS)
                r["cpu_us_per_req"] = (cpu_ticks([pid]) - before) * 1e6 / TICK / max(r["requests"], 1)
                results.setdefault(case, []).append(r)
        counts = {case: spans(admin) for case, (_, admin, _) in CASES.items()}
        requests = {case: sum(r["requests"] for r in results[case]) for case in CASES}
    finally:
        stop(procs)
        sink.shutdown()
        if os.environ.get("BENCH_KEEP"):
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)

    med = lambda case, k: statistics.median(r[k] for r in results[case])
    base = med("tracing off", "cpu_us_per_req")
    if SMOKE:
        print("SMOKE RUN (debug build, one short round): this checks that the harness works; the figures mean nothing.\n")
    print(f"## Tracing ({ROUNDS} interleaved rounds, wrk -t2 -c{CONNECTIONS}, medians)\n")
    print("| case | req/s | p50 ms | p99 ms | CPU µs/call | vs off | spans exported / dropped / failed | failed |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for case in CASES:
        n = sum(r["failed"] for r in results[case])
        failed += n
        cpu = med(case, "cpu_us_per_req")
        c = counts[case]
        print(f"| {case} | {med(case, 'rps'):.0f} | {med(case, 'p50'):.3f} | {med(case, 'p99'):.3f} | {cpu:.1f} | {cpu / base:.2f} | {c['exported']} / {c['dropped']} / {c['failed']} | {n} |")
    print(f"\nThe sink took {Sink.exports} exports, {Sink.bytes / 1e6:.1f} MB.")
    on = counts["tracing on, sampling 1.0"]
    # wrk does not count the requests in flight when it stops; their spans count.
    print(f"Requests wrk counted with sampling 1.0: {requests['tracing on, sampling 1.0']}; spans exported: {on['exported']}.")
    ratio = med("tracing on, sampling 1.0", "cpu_us_per_req") / base
    print(f"\nGoal: tracing on at sampling 1.0 costs at most {GOAL_ON}× the CPU of tracing off: {ratio:.2f} {'met' if ratio <= GOAL_ON else 'MISSED'}.")
    if failed:
        raise SystemExit(f"{failed} requests failed")
    if on["dropped"] or on["failed"]:
        print("Note: spans were dropped or failed; the CPU figure for sampling 1.0 leaves their export out.")
    if counts["tracing on, sampling 0"]["exported"] or counts["tracing off"]["exported"]:
        raise SystemExit("spans were exported with sampling 0 or tracing off")


if __name__ == "__main__":
    main()
