"""A Python MCP server (the SDK's MCPServer, formerly FastMCP) used as an upstream in
mcpgate's tests: a tiny document store with the same tool names as the sample server.

usage: py_server.py PORT|unix:/path/to/socket|stdio [json|sse]

On a unix socket it takes the Host a gateway sends there (`localhost`, as nginx does).
"""

import sys

from mcp.server.mcpserver import MCPServer

DOCS = {"welcome": "This store holds the team's notes.", "old-plan": "Superseded."}

server = MCPServer("py-docs")


@server.tool()
def search_knowledge(query: str) -> str:
    """Search documents by a word in their text."""
    return ", ".join(k for k, v in DOCS.items() if query.lower() in v.lower()) or "no match"


@server.tool()
def get_document(id: str) -> str:
    """Read one document."""
    return DOCS.get(id, f"no document {id!r}")


@server.tool()
def delete_document(id: str) -> str:
    """Delete a document."""
    return "deleted" if DOCS.pop(id, None) is not None else f"no document {id!r}"


@server.tool()
def move_document(id: str, new_id: str) -> str:
    """Deprecated: rename a document."""
    DOCS[new_id] = DOCS.pop(id)
    return f"moved {id} to {new_id}"


if __name__ == "__main__":
    where = sys.argv[1]
    json_response = len(sys.argv) > 2 and sys.argv[2] == "json"
    if where == "stdio":
        server.run("stdio")
    elif where.startswith("unix:"):
        import uvicorn
        from mcp.server.transport_security import TransportSecuritySettings

        security = TransportSecuritySettings(allowed_hosts=["localhost"], allowed_origins=[])
        app = server.streamable_http_app(json_response=json_response, transport_security=security)
        uvicorn.run(app, uds=where.removeprefix("unix:"), log_level="warning")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(where), json_response=json_response)
