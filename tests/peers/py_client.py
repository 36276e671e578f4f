"""The Python MCP SDK client, as mcpgate's tests drive it: connect, list tools, call one
tool, print what it saw as one JSON line.

usage: py_client.py URL MODE BEARER TOOL ARGS_JSON HIDDEN
  MODE: auto (server/discover, falling back to initialize) or legacy (initialize)
  BEARER: a token for Authorization: Bearer, or '-' for none
  HIDDEN: a tool the gateway hides; calling it must fail
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> None:
    url, mode, bearer, tool, args, hidden = sys.argv[1:7]
    args = json.loads(args)
    headers = {} if bearer == "-" else {"Authorization": f"Bearer {bearer}"}
    http = create_mcp_http_client(headers=headers)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        tools = await client.list_tools()
        result = await client.call_tool(tool, args)
        refused = None
        try:
            await client.call_tool(hidden, {})
        except Exception as e:  # the gateway's refusal arrives as a JSON-RPC error
            refused = str(e)
        print(json.dumps({
            "tools": [t.name for t in tools.tools],
            "call": [c.text for c in result.content if getattr(c, "type", "") == "text"],
            "is_error": bool(result.is_error),
            "refused": refused,
            "version": client.protocol_version,
        }))


asyncio.run(main())
