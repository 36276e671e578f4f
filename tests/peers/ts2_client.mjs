// A 2026-07-28 MCP client on the TypeScript SDK v2, for mcpgate's tests of the stateless
// protocol. Usage: node ts2_client.mjs URL SCENARIO [BEARER]
// It prints one JSON object: what each step saw (or the error it got), and exits 0 unless
// the client could not connect at all.
//   basic   discover, lists, calls (an ASCII and a non-ASCII tool, and one whose argument
//           the client mirrors in Mcp-Param-Region, base64-encoded), a resource, a prompt,
//           a call that asks for confirmation (the elicitation handler says yes), progress
//   denied  calls and reads a profile refuses, and what error each one got
//   listen  opens subscriptions/listen for tool list changes and two resources, calls
//           `touch`, and reports what reached the stream
//   docs    for a document store (our sample and Python servers): discover, the tool
//           list, get_document, and move_document (which a profile hides)
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, scenario, bearer] = process.argv.slice(2);
const out = {};

const client = new Client(
    { name: 'mcpgate-ts2-test', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
client.setRequestHandler('elicitation/create', async (req) => {
    out.elicited = req.params.message;
    return { action: 'accept', content: { confirm: true } };
});
const requestInit = bearer ? { headers: { Authorization: `Bearer ${bearer}` } } : undefined;
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
await client.connect(transport);

const step = async (name, f) => {
    try {
        out[name] = await f();
    } catch (e) {
        out[name] = { error: e.code ?? null, message: String(e.message ?? e) };
    }
};
const texts = (r) => r.content?.map((c) => c.text).join('');

if (scenario === 'basic') {
    await step('discover', async () => {
        const d = await client.discover();
        return { versions: d.supportedVersions, capabilities: Object.keys(d.capabilities ?? {}).sort() };
    });
    await step('tools', async () => (await client.listTools()).tools.map((t) => t.name));
    await step('echo', async () => texts(await client.callTool({ name: 'echo', arguments: { text: 'hi' } })));
    await step('where', async () => texts(await client.callTool({ name: 'where', arguments: { region: 'eu-west 1 ü', what: 'rain' } })));
    await step('grusse', async () => texts(await client.callTool({ name: 'grüße', arguments: { who: 'Welt' } })));
    await step('confirm', async () => texts(await client.callTool({ name: 'delete_note', arguments: { id: 'n1' } })));
    await step('progress', async () => {
        const seen = [];
        const r = await client.callTool(
            { name: 'slow', arguments: { ms: 150 } },
            { onprogress: (p) => seen.push(p.progress) },
        );
        return { text: texts(r), progress: seen };
    });
    await step('resources', async () => (await client.listResources()).resources.map((r) => r.uri));
    await step('read', async () => (await client.readResource({ uri: 'file:///public/readme.txt' })).contents[0].text);
    await step('prompt', async () => (await client.getPrompt({ name: 'greet', arguments: { who: 'Ada' } })).messages[0].content.text);
} else if (scenario === 'denied') {
    await step('tools', async () => (await client.listTools()).tools.map((t) => t.name));
    await step('delete', async () => texts(await client.callTool({ name: 'delete_note', arguments: { id: 'n2' } })));
    await step('secret', async () => (await client.readResource({ uri: 'file:///secret/keys.txt' })).contents[0].text);
    await step('echo', async () => texts(await client.callTool({ name: 'echo', arguments: { text: 'still fine' } })));
} else if (scenario === 'docs') {
    await step('discover', async () => (await client.discover()).supportedVersions);
    await step('tools', async () => (await client.listTools()).tools.map((t) => t.name).sort());
    await step('get', async () => texts(await client.callTool({ name: 'get_document', arguments: { id: 'welcome' } })));
    await step('move', async () => texts(await client.callTool({ name: 'move_document', arguments: { id: 'welcome', new_id: 'w' } })));
} else if (scenario === 'listen') {
    const seen = [];
    client.setNotificationHandler('notifications/tools/list_changed', () => seen.push('tools'));
    client.setNotificationHandler('notifications/resources/updated', (n) => seen.push(`updated ${n.params.uri}`));
    await step('listen', async () => {
        const sub = await client.listen({
            toolsListChanged: true,
            resourceSubscriptions: ['file:///public/readme.txt', 'file:///secret/keys.txt'],
        });
        out.acknowledged = sub.acknowledged ?? null;
        await client.callTool({ name: 'touch', arguments: { uri: 'file:///public/readme.txt' } });
        await client.callTool({ name: 'touch', arguments: { uri: 'file:///secret/keys.txt' } });
        const deadline = Date.now() + 3000;
        while (seen.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        await new Promise((r) => setTimeout(r, 300));
        await sub.close();
        return seen.sort();
    });
}
console.log(JSON.stringify(out));
await client.close();
process.exit(0);
