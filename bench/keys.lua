-- A small tools/call whose tool name is new on every request (thread k of BENCH_THREADS
-- numbers its calls k, k + BENCH_THREADS, …): each one is a rate key no call used before.
-- Tool names nobody serves: the upstream answers each with an error, after the limits.
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  step = tonumber(os.getenv("BENCH_THREADS") or "2")
  n = id + tonumber(os.getenv("BENCH_OFFSET") or "0")
end

function request()
  n = n + step
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["Authorization"] = os.getenv("BENCH_AUTHORIZATION"),
  }, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"key_' .. n .. '","arguments":{}}}')
end
