"""The Python MCP SDK 2.3 client with input callbacks, for mcpgate's bridge tests: in
`legacy` mode it speaks sessions (initialize), in `modern` mode 2026-07-28 (server/discover),
whatever the server behind mcpgate speaks. Prints what it saw as one JSON line.

usage: py_bridge_client.py URL MODE BEARER
  MODE: legacy | auto
"""

import asyncio
import json
import sys

import mcp.types as t
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def elicit(context, params):
    asked.append(params.message)
    if params.message == "Your name?":
        return t.ElicitResult(action="accept", content={"name": "Ada"})
    return t.ElicitResult(action="accept", content={"confirm": True})


async def sample(context, params):
    text = params.messages[0].content.text
    return t.CreateMessageResult(
        role="assistant", content=t.TextContent(type="text", text=f"short ({len(text)})"), model="py-model"
    )


async def roots(context):
    return t.ListRootsResult(roots=[t.Root(uri="file:///py", name="py")])


asked = []


async def main() -> None:
    url, mode, bearer = sys.argv[1:4]
    headers = {} if bearer == "-" else {"Authorization": f"Bearer {bearer}"}
    http = create_mcp_http_client(headers=headers)
    out = {}
    progress = []

    async def on_progress(p, total, message):
        progress.append(p)

    def text(r):
        return " ".join(c.text for c in r.content if getattr(c, "type", "") == "text")

    async with http, Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=roots,
    ) as client:
        out["version"] = client.protocol_version
        out["tools"] = sorted(x.name for x in (await client.list_tools()).tools)
        out["echo"] = text(await client.call_tool("echo", {"text": "hi"}))
        out["slow"] = text(await client.call_tool("slow", {"ms": 150}, progress_callback=on_progress))
        out["progress"] = progress
        out["read"] = (await client.read_resource("file:///public/readme.txt")).contents[0].text
        out["prompt"] = (await client.get_prompt("greet", {"who": "Ada"})).messages[0].content.text
        out["delete"] = text(await client.call_tool("delete_note", {"id": "n1"}))
        out["summary"] = text(await client.call_tool("summarize", {"text": "a long text"}))
        out["roots"] = text(await client.call_tool("roots", {}))
        out["twice"] = text(await client.call_tool("ask_twice", {}))
    out["asked"] = asked
    print(json.dumps(out))


asyncio.run(main())
