// The TypeScript MCP SDK client, as mcpgate's tests drive it: connect, list tools, call
// one tool, try a hidden one, print what it saw as one JSON line.
// usage: node ts_client.mjs URL BEARER|- TOOL ARGS_JSON HIDDEN
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, bearer, tool, args, hidden] = process.argv.slice(2);
const headers = bearer === "-" ? {} : { Authorization: `Bearer ${bearer}` };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: "mcpgate-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
let refused = null;
try {
  await client.callTool({ name: hidden, arguments: {} });
} catch (e) {
  refused = String(e.message ?? e);
}
console.log(JSON.stringify({
  tools: tools.tools.map((t) => t.name),
  call: result.content.filter((c) => c.type === "text").map((c) => c.text),
  is_error: Boolean(result.isError),
  refused,
}));
await transport.terminateSession().catch(() => {});
await client.close();
