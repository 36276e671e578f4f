-- The small tools/call of call.lua, each request with a bearer token not used before:
-- tokens are read from the file BENCH_TOKENS (one per line); thread k of BENCH_THREADS
-- takes every BENCH_THREADS-th, starting at the k-th. A thread stops when its share is
-- used up, so every request is the first with its token (but for the few in flight on
-- its other connections then).
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  step = tonumber(os.getenv("BENCH_THREADS") or "2")
  tokens = {}
  for line in io.lines(os.getenv("BENCH_TOKENS")) do
    tokens[#tokens + 1] = line
  end
  next_at = id + 1
  used_up = false
  body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_001","arguments":{"id":"welcome"}}}'
end

function request()
  local token = tokens[next_at]
  if token == nil then
    used_up = true
    token = tokens[#tokens]
  end
  next_at = next_at + step
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["Authorization"] = "Bearer " .. token,
  }, body)
end

function response(status, headers, body)
  if used_up then
    wrk.thread:stop()
  end
end
