"""A Python MCP server (the SDK's MCPServer) whose tools are named on the command line, for
mcpgate's federation tests: names crafted to meet after prefixing, or to look like another
member's. Every tool answers "<server>:<tool>", so a test sees which server ran a call.

usage: py_named.py PORT SERVER_NAME TOOL [TOOL ...]
"""

import sys

from mcp.server.mcpserver import MCPServer

port, name, tools = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
server = MCPServer(name)


def register(tool: str) -> None:
    def run() -> str:
        return f"{name}:{tool}"

    server.add_tool(run, name=tool, description=f"The tool {tool} of {name}.")


for t in tools:
    register(t)

server.run("streamable-http", host="127.0.0.1", port=port)
