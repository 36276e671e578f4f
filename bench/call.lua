-- A small tools/call, as an MCP SDK client sends it. BENCH_AUTHORIZATION, when set, is
-- sent as its Authorization header. BENCH_SESSION, when set, is sent as
-- the Mcp-Session-Id of every call (one session for all connections: every call then
-- takes its turn in mcpgate's per-session order).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = os.getenv("BENCH_ACCEPT") or "application/json, text/event-stream"
if os.getenv("BENCH_AUTHORIZATION") then
  wrk.headers["Authorization"] = os.getenv("BENCH_AUTHORIZATION")
end
if os.getenv("BENCH_SESSION") then
  wrk.headers["Mcp-Session-Id"] = os.getenv("BENCH_SESSION")
end
-- BENCH_TOOL, when set, is the tool called (default tool_001).
local tool = os.getenv("BENCH_TOOL") or "tool_001"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{"id":"welcome"}}}'
