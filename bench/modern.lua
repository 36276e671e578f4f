-- A small tools/call as a 2026-07-28 client sends it: no session, the envelope in _meta,
-- the three mirrored headers. BENCH_NAME_HEADER replaces the Mcp-Name value (for its
-- base64 form).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = os.getenv("BENCH_NAME_HEADER") or "tool_001"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_001","arguments":{"id":"welcome"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}'
