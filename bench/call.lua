-- A small tools/call, as an MCP SDK client sends it.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = os.getenv("BENCH_ACCEPT") or "application/json, text/event-stream"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_001","arguments":{"id":"welcome"}}}'
