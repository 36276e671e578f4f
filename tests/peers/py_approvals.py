"""A Python MCP server (the SDK's MCPServer) whose tools write down every call they run, for
mcpgate's approval tests: what a person approved must run once, with the arguments shown,
and what was declined never.

  delete_note(path)   destructive: appends {"tool": "delete_note", "path": …} to RAN
  archive_note(path)  not read-only, not destructive: appended likewise
  read_note(path)     read-only: not written down

usage: py_approvals.py PORT RAN
"""

import json
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

port = int(sys.argv[1])
ran = sys.argv[2]
server = MCPServer("approval-notes")


def note(tool: str, path: str) -> None:
    with open(ran, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "path": path}) + "\n")


@server.tool(annotations=ToolAnnotations(destructiveHint=True, readOnlyHint=False))
def delete_note(path: str) -> str:
    """Delete a note."""
    note("delete_note", path)
    return f"deleted {path}"


@server.tool(annotations=ToolAnnotations(destructiveHint=False, readOnlyHint=False))
def archive_note(path: str) -> str:
    """Archive a note."""
    note("archive_note", path)
    return f"archived {path}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_note(path: str) -> str:
    """Read a note."""
    return f"the text of {path}"


server.run("streamable-http", host="127.0.0.1", port=port)
