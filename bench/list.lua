-- tools/list: the upstream lists 500 tools.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
