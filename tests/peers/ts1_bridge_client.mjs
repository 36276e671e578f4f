// A 2025-11-25 client on the TypeScript SDK v1 (1.32) that can be asked for input, for
// mcpgate's bridge tests: whatever the server behind mcpgate speaks, this client speaks
// sessions. Prints what it saw as one JSON line.
// usage: node ts1_bridge_client.mjs URL BEARER|- SCENARIO
//   full:    tools, a call, progress, a resource, a prompt, the three input kinds, two
//            rounds, a log level, a list change and a resource subscription on the GET
//            stream
//   decline: the elicitation is declined
//   error:   the elicitation is answered with an error
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [url, bearer, scenario = "full"] = process.argv.slice(2);
const headers = bearer === "-" ? {} : { Authorization: `Bearer ${bearer}` };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client(
  { name: "ts1-bridge", version: "1.32.2" },
  { capabilities: { elicitation: { form: {} }, sampling: {}, roots: { listChanged: true } } },
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked.push(req.params.message);
  if (scenario === "decline") return { action: "decline" };
  if (scenario === "error") throw new Error("the user walked away");
  if (req.params.message === "Your name?") return { action: "accept", content: { name: "Ada" } };
  return { action: "accept", content: { confirm: true } };
});
client.setRequestHandler(CreateMessageRequestSchema, async (req) => ({
  role: "assistant",
  content: { type: "text", text: `short (${req.params.messages[0].content.text.length})` },
  model: "test-model",
}));
client.setRequestHandler(ListRootsRequestSchema, async () => ({
  roots: [{ uri: "file:///work", name: "work" }],
}));
let changed = 0;
let onChange = null;
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  changed += 1;
  onChange?.();
});
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, async (n) => {
  logs.push(n.params.level);
});
const updated = [];
let onUpdate = null;
client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => {
  updated.push(n.params.uri);
  onUpdate?.();
});
const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join(" ");
const out = {};
await client.connect(transport);
out.version = transport.protocolVersion ?? null;
out.server = client.getServerVersion();
out.capabilities = client.getServerCapabilities();
out.session = Boolean(transport.sessionId);
if (scenario === "full") {
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  out.echo = text(await client.callTool({ name: "echo", arguments: { text: "hi" } }));
  const progress = [];
  out.slow = text(
    await client.callTool({ name: "slow", arguments: { ms: 150 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    }),
  );
  out.progress = progress;
  out.read = (await client.readResource({ uri: "file:///public/readme.txt" })).contents[0].text;
  out.prompt = (await client.getPrompt({ name: "greet", arguments: { who: "Ada" } })).messages[0].content.text;
  out.delete = text(await client.callTool({ name: "delete_note", arguments: { id: "n1" } }));
  out.summary = text(await client.callTool({ name: "summarize", arguments: { text: "a long text" } }));
  out.roots = text(await client.callTool({ name: "roots", arguments: {} }));
  out.twice = text(await client.callTool({ name: "ask_twice", arguments: {} }));
  await client.ping();
  out.ping = true;
  // No level set: a 2026-07-28 server logs nothing; then only from `info` up.
  out.quiet = text(await client.callTool({ name: "chatty", arguments: {} }));
  out.quiet_logs = logs.splice(0);
  await client.setLoggingLevel("info");
  out.chatty = text(await client.callTool({ name: "chatty", arguments: {} }));
  out.logs = logs.splice(0);
  // A list change reaches the GET stream (opened after initialization).
  const seen = new Promise((resolve) => {
    onChange = resolve;
    setTimeout(resolve, 5000);
  });
  await new Promise((r) => setTimeout(r, 300));
  await client.callTool({ name: "touch", arguments: { uri: "file:///public/readme.txt" } });
  await seen;
  out.changed = changed;
  out.updated_unsubscribed = updated.splice(0);
  // Subscribed: the next touch reaches the GET stream as notifications/resources/updated.
  await client.subscribeResource({ uri: "file:///public/readme.txt" });
  const touched = new Promise((resolve) => {
    onUpdate = resolve;
    setTimeout(resolve, 5000);
  });
  await client.callTool({ name: "touch", arguments: { uri: "file:///public/readme.txt" } });
  await touched;
  out.updated = updated.splice(0);
  // Unsubscribed: nothing more.
  await client.unsubscribeResource({ uri: "file:///public/readme.txt" });
  await client.callTool({ name: "touch", arguments: { uri: "file:///public/readme.txt" } });
  await new Promise((r) => setTimeout(r, 300));
  out.updated_after = updated.splice(0);
} else {
  try {
    out.delete = text(await client.callTool({ name: "delete_note", arguments: { id: "n2" } }));
  } catch (e) {
    out.error = String(e.message ?? e);
  }
}
out.asked = asked;
console.log(JSON.stringify(out));
await transport.terminateSession().catch(() => {});
await client.close();
