// The TypeScript MCP SDK client against a profile with resources and prompts rules:
// lists resources, resource templates and prompts, then reads and gets one allowed and
// a few refused ones; prints what it saw as one JSON line.
// usage: node ts_policy_client.mjs URL BEARER
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, bearer] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
});
const client = new Client({ name: "mcpgate-policy-test", version: "1.0.0" });
await client.connect(transport);

const refused = async (call) => {
  try {
    await call();
    return null;
  } catch (e) {
    return String(e.message ?? e);
  }
};
const resources = (await client.listResources()).resources.map((r) => r.uri);
const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
const read = await client.readResource({ uri: "demo://resource/static/document/architecture.md" });
const got = await client.getPrompt({ name: "simple-prompt" });
console.log(JSON.stringify({
  resources,
  templates,
  prompts,
  read: read.contents.length,
  got: got.messages.length,
  refused_read: await refused(() => client.readResource({ uri: "demo://resource/static/document/instructions.md" })),
  refused_dots: await refused(() => client.readResource({ uri: "demo://resource/static/document/%2e%2e/%2e%2e/dynamic/blob/1" })),
  refused_prompt: await refused(() => client.getPrompt({ name: "resource-prompt", arguments: { resourceType: "Text", resourceId: "1" } })),
}));
await transport.terminateSession().catch(() => {});
await client.close();
