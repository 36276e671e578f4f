# Two mcpgate binaries on the same upstream and configuration, their wrk rounds
# interleaved (A then B, then B then A), so that what the machine does meanwhile falls on
# both: CPU per request, medians and the spread of the per-round ratios. For a change that
# claims to cost nothing. The cases (CASES, comma-separated; all by default):
#   call       a small tools/call of a legacy client on a token route
#   list       a 500-tool tools/list, filtered by the profile
#   bridged    a small tools/call of a 2026-07-28 client to the same server treated as a
#              legacy one (mcpgate's session, the answer completed)
#   federated  a small tools/call to a federated profile of two members, renamed on its way
# `bridged` and `federated` need a build with both generations and federation (wave 3);
# `CASES=call,list` compares with an older one.
#   python3 bench/ab.py OLD_BINARY NEW_BINARY      (ROUNDS=6 DUR=5 by default)
# With MODE=instructions, each binary runs under valgrind (callgrind) instead: 100 requests
# one after another on one connection to warm it, then the counters are zeroed and 2,000
# more counted (400 for the list); their instructions over their number is the figure.
# Startup is left out that way: it varies by millions of instructions between runs (a
# lazily built table whose building another thread waits for), which the earlier way of
# counting (two runs' difference) spread over the requests as up to 9 % of noise
# (docs/benchmarks.md, issue 62).
# Steadier in a private network namespace (docs/benchmarks.md). KEEP=DIR keeps each
# callgrind profile there (A-call-2500.out, …) for callgrind_annotate.
import os, subprocess, sys, time, re, statistics, socket, tempfile
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A, B = sys.argv[1], sys.argv[2]
ROUNDS = int(os.environ.get("ROUNDS", "6")); DUR = os.environ.get("DUR", "5")
CASES = os.environ.get("CASES", "call,list,bridged,federated").split(",")
WAVE3 = '\n'.join(l.strip() for l in """
[upstreams.old]
url = "http://127.0.0.1:18700/mcp"
protocol = "legacy"
[upstreams.a]
url = "http://127.0.0.1:18700/mcp"
[upstreams.b]
url = "http://127.0.0.1:18700/mcp"
[profiles.old]
upstream = "old"
allow = ["tool_0*"]
[profiles.both]
upstreams = ["a", "b"]
prefix = "always"
allow = ["*"]
[[routes]]
listen = "bench"
path = "/old"
profile = "old"
auth = "none"
[[routes]]
listen = "bench"
path = "/both"
profile = "both"
auth = "none"
""".strip().splitlines()) + "\n"
TICK = os.sysconf("SC_CLK_TCK")
TOKEN = "bench-token-0123456789abcdef0123456789"
# case: (wrk script, path, environment)
RUNS = {
    "call": ("call.lua", f"/gpt-mcp/{TOKEN}/mcp", {}),
    "list": ("list.lua", f"/gpt-mcp/{TOKEN}/mcp", {}),
    "bridged": ("modern.lua", "/old", {}),
    "federated": ("call.lua", "/both", {"BENCH_TOOL": "a__tool_001"}),
}
work = tempfile.mkdtemp(prefix="mcpgate-ab-")
h = subprocess.run([A, "token", "hash"], input=TOKEN, capture_output=True, text=True).stdout.strip()
def conf(port, admin):
    return f'''[[listen]]
name = "bench"
addr = "127.0.0.1:{port}"
[admin]
addr = "127.0.0.1:{admin}"
[upstreams.bench]
url = "http://127.0.0.1:18700/mcp"
[tools]
hidden = ["tool_099"]
[profiles.gpt]
upstream = "bench"
allow = ["tool_0*"]
[[routes]]
listen = "bench"
path = "/gpt-mcp/{{token}}/mcp"
profile = "gpt"
[[tokens]]
id = "bench"
sha256 = "{h}"
profiles = ["gpt"]
[limits]
max_body = "1MiB"
rate = [ {{ key = "token", rate = "1000000/s", burst = 1000000 }} ]
[audit]
path = "{work}/audit-{port}.jsonl"
durable = ["delete_*"]
[log]
format = "json"
level = "info"
''' + (WAVE3 if {"bridged", "federated"} & set(CASES) else "")
def wait(port):
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port)).close(); return
        except OSError: time.sleep(0.05)
procs = [subprocess.Popen([A, "sample-upstream", "--listen", "127.0.0.1:18700", "--tools", "500", "--result-bytes", "200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
wait(18700)
if os.environ.get("MODE") == "instructions":
    import http.client, json
    META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "ab", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": {}}
    # case: (path, method, params, headers): what the wrk scripts send.
    ONE = {
        "call": (RUNS["call"][1], "tools/call", {"name": "tool_001", "arguments": {"id": "welcome"}}, {}),
        "list": (RUNS["list"][1], "tools/list", {}, {}),
        "bridged": ("/old", "tools/call", {"name": "tool_001", "arguments": {"id": "welcome"}, "_meta": META}, {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "tool_001"}),
        "federated": ("/both", "tools/call", {"name": "a__tool_001", "arguments": {"id": "welcome"}}, {}),
    }
    def counted(binary, conf_path, port, case, n):
        """Instructions a request over `n` requests on one connection, counted after 100
        requests of warm-up: the counters are zeroed then (`callgrind_control -z`) and
        dumped after the n (`-d`), so startup, which varies by millions between runs,
        counts for nothing."""
        out = f"{work}/callgrind.out"
        for old in [f for f in os.listdir(work) if f.startswith("callgrind.out")]:
            os.remove(os.path.join(work, old))
        p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "run", "-c", conf_path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try: socket.create_connection(("127.0.0.1", port)).close(); break
            except OSError: time.sleep(0.05)
        path, method, params, headers = ONE[case]
        c = http.client.HTTPConnection("127.0.0.1", port)
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        def send(k):
            for _ in range(k):
                c.request("POST", path, body, h); r = c.getresponse(); data = r.read()
                if r.status != 200 or b'"result"' not in data:
                    p.terminate(); sys.exit(f"{case}: {r.status} {data[:200]!r}")
        control = lambda flag: subprocess.run(["callgrind_control", flag, str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        send(100)
        control("-z")
        send(n)
        control("-d")
        c.close(); p.terminate(); p.wait()
        dump = f"{out}.1"
        if os.environ.get("KEEP"):
            import shutil; shutil.copy(dump, os.path.join(os.environ["KEEP"], f"{'A' if binary == A else 'B'}-{case}-{n}.out"))
        return int(re.search(r"^(?:summary|totals): (\d+)", open(dump).read(), re.M).group(1)) / n
    try:
        for case in CASES:
            n = 400 if case == "list" else 2000
            per = {}
            for name, binary, port, admin in (("A", A, 18701, 18711), ("B", B, 18702, 18712)):
                path = f"{work}/{name}.toml"; open(path, "w").write(conf(port, admin))
                per[name] = counted(binary, path, port, case, n)
            print(f"{case}: A {per['A']:.0f}  B {per['B']:.0f} instructions a request  B/A {per['B'] / per['A']:.3f}")
    finally:
        for p in procs: p.terminate()
    sys.exit(0)
gates = {}
for name, binary, port, admin in (("A", A, 18701, 18711), ("B", B, 18702, 18712)):
    path = f"{work}/{name}.toml"; open(path, "w").write(conf(port, admin))
    p = subprocess.Popen([binary, "run", "-c", path], stdout=subprocess.DEVNULL, stderr=open(f"{work}/{name}.log", "w"))
    procs.append(p); wait(port); gates[name] = (p, port)
def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split(); return int(f[11]) + int(f[12])
res = {name: {case: [] for case in CASES} for name in ("A", "B")}
try:
    for r in range(ROUNDS):
        for case in CASES:
            script, path, env = RUNS[case]
            for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
                p, port = gates[name]
                before = ticks(p.pid)
                out = subprocess.run(["wrk", "-t2", "-c16", f"-d{DUR}s", "-s", os.path.join(ROOT, "bench", script), f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, env={**os.environ, **env}).stdout
                n = int(re.search(r"(\d+) requests in", out).group(1))
                # Every answer must be a success: a refused call is cheaper, and would pass
                # for a faster build.
                if "Non-2xx" in out:
                    sys.exit(f"{name} {case}: answers that are not 2xx:\n{out}")
                res[name][case].append((ticks(p.pid) - before) * 1e6 / TICK / n)
    for case in CASES:
        a = statistics.median(res["A"][case]); b = statistics.median(res["B"][case])
        ratios = sorted(x / y for x, y in zip(res["B"][case], res["A"][case]))
        print(f"{case}: A {a:.1f} us  B {b:.1f} us  B/A {b/a:.3f}  (per-round ratios {ratios[0]:.2f}..{ratios[-1]:.2f})")
finally:
    for p in procs: p.terminate()
