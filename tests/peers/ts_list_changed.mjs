// The TypeScript MCP SDK client holding its GET stream open: prints its tool list once
// connected ({"ready": [...]}), then, on each notifications/tools/list_changed, lists the
// tools again and prints them ({"changed": [...]}); ends after COUNT changes.
// usage: node ts_list_changed.mjs URL BEARER COUNT
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, bearer, count] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
});
const client = new Client({ name: "mcpgate-list-changed-test", version: "1.0.0" });
let changes = 0;
const names = async () => (await client.listTools()).tools.map((t) => t.name);
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  console.log(JSON.stringify({ changed: await names() }));
  changes += 1;
  if (changes >= Number(count)) {
    await transport.terminateSession().catch(() => {});
    await client.close();
    process.exit(0);
  }
});
await client.connect(transport);
// Give the transport a moment to open its GET stream before saying so.
await new Promise((r) => setTimeout(r, 300));
console.log(JSON.stringify({ ready: await names() }));
setTimeout(() => {
  console.error("no list change came");
  process.exit(1);
}, 60_000);
