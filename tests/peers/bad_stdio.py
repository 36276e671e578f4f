"""A small stdio MCP server that misbehaves on purpose, for mcpgate's stdio tests. Plain
Python, no SDK: one JSON-RPC message per line.

usage: bad_stdio.py MODE [MARKER]   (MARKER: ignored; tests find the process by it)
  garbage   answers, with junk lines (not JSON, JSON but not JSON-RPC, a 20 MiB line)
            written before each answer
  crash     exits (status 3) on tools/call, before answering
  deaf      answers initialize, then never reads stdin again
  flood     answers, while writing 200,000 lines to stderr
  stubborn  answers; ignores SIGTERM and the end of stdin, so only SIGKILL ends it
  talk      on tools/call: a progress notification, a log message, then a sampling
            request to the client; answers the call with the text the client sent back
  record    appends every line it reads to the file named by $RECORD; lists one tool,
            `query`, whose `region` is mirrored in Mcp-Param-Region; never answers a
            tools/call of `wait`; answers subscriptions/listen with an acknowledgement
            and one resource update, and ends it only when cancelled; answers methods
            it does not know with -32601
"""

import json
import os
import signal
import sys
import threading
import time

MODE = sys.argv[1]
out = sys.stdout


def send(message):
    out.write(json.dumps(message) + "\n")
    out.flush()


def result(id, value):
    send({"jsonrpc": "2.0", "id": id, "result": value})


def initialize(m):
    result(m["id"], {"protocolVersion": m["params"].get("protocolVersion", "2025-06-18"),
                     "capabilities": {"tools": {}}, "serverInfo": {"name": "bad-" + MODE, "version": "1"}})


def text(s):
    return {"content": [{"type": "text", "text": s}], "isError": False}


if MODE == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if MODE == "flood":
    def flood():
        for i in range(200_000):
            sys.stderr.write(f"flood line {i}\n")
        sys.stderr.flush()
    threading.Thread(target=flood, daemon=True).start()

listening = set()

for line in sys.stdin:
    if MODE == "record":

        with open(os.environ["RECORD"], "a") as f:
            f.write(line if line.endswith("\n") else line + "\n")
    m = json.loads(line)
    method, id = m.get("method"), m.get("id")
    if MODE == "record":
        sub = {"io.modelcontextprotocol/subscriptionId": id}
        if method == "tools/list":
            result(id, {"tools": [{"name": "query", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}, "sql": {"type": "string"}}}}]})
        elif method == "tools/call" and m["params"].get("name") == "wait":
            pass
        elif method == "subscriptions/listen":
            listening.add(id)
            send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                  "params": {"_meta": sub, "notifications": m["params"].get("notifications", {})}})
            send({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                  "params": {"_meta": sub, "uri": "file:///a"}})
        elif method == "notifications/cancelled":
            listening.discard(m["params"].get("requestId"))
        elif id is not None and method not in ("initialize", "tools/call", "server/discover"):
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
        elif id is not None and method is not None:
            result(id, text("ran " + json.dumps(m["params"])))
        continue
    if MODE == "garbage" and id is not None:
        out.write("this is not json\n")
        out.write('{"hello": "json but not json-rpc"}\n')
        out.write("x" * (20 << 20) + "\n")
        out.flush()
    if method == "initialize":
        initialize(m)
        if MODE == "deaf":
            while True:
                time.sleep(3600)
    elif method == "tools/list":
        result(id, {"tools": [{"name": "echo", "description": "echo", "inputSchema": {"type": "object"}}]})
    elif method == "tools/call":
        if MODE == "crash":
            sys.exit(3)
        if m["params"].get("name") == "env":
            import os
            result(id, text(json.dumps(sorted(os.environ))))
            continue
        if MODE == "talk":
            token = m["params"].get("_meta", {}).get("progressToken")
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": 1, "total": 2}})
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "thinking"}})
            send({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
                  "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 5}})
            answer = json.loads(sys.stdin.readline())
            result(id, text("client said: " + answer["result"]["content"]["text"]))
        else:
            result(id, text("echo: " + json.dumps(m["params"].get("arguments", {}))))
    elif id is not None and method is not None:
        result(id, {})

if MODE == "stubborn":
    while True:
        time.sleep(3600)
