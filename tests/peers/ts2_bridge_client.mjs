// A 2026-07-28 client on the TypeScript SDK v2 (2.4) that can be asked for input, for
// mcpgate's bridge tests: whatever the server behind mcpgate speaks, this client speaks
// 2026-07-28 (no session, server/discover, input_required rounds). Prints what it saw as
// one JSON line.
// usage: node ts2_bridge_client.mjs URL BEARER|- SCENARIO
//   full:    discover, tools, a call, progress, a resource, a prompt, the three input
//            kinds, two rounds, a listen stream with a list change and a resource update
//   decline: the elicitation is declined
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, bearer, scenario = 'full'] = process.argv.slice(2);
const headers = bearer === '-' ? {} : { Authorization: `Bearer ${bearer}` };
const client = new Client(
    { name: 'ts2-bridge', version: '2.4.0' },
    {
        capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} },
        versionNegotiation: { mode: { pin: '2026-07-28' } },
    },
);
const asked = [];
client.setRequestHandler('elicitation/create', async (req) => {
    asked.push(req.params.message);
    if (scenario === 'decline') return { action: 'decline' };
    if (req.params.message === 'Your name?') return { action: 'accept', content: { name: 'Ada' } };
    return { action: 'accept', content: { confirm: true } };
});
client.setRequestHandler('sampling/createMessage', async (req) => ({
    role: 'assistant',
    content: { type: 'text', text: `short (${req.params.messages[0].content.text.length})` },
    model: 'test-model',
}));
client.setRequestHandler('roots/list', async () => ({ roots: [{ uri: 'file:///modern', name: 'modern' }] }));
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
await client.connect(transport);
const out = {};
const step = async (name, f) => {
    try {
        out[name] = await f();
    } catch (e) {
        out[name] = { error: e.code ?? null, message: String(e.message ?? e) };
    }
};
const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
if (scenario === 'full') {
    await step('discover', async () => {
        const d = await client.discover();
        return {
            versions: d.supportedVersions,
            capabilities: Object.keys(d.capabilities ?? {}).sort(),
            server: d._meta?.['io.modelcontextprotocol/serverInfo']?.name ?? null,
            instructions: d.instructions ?? null,
        };
    });
    await step('tools', async () => (await client.listTools()).tools.map((t) => t.name).sort());
    await step('echo', async () => text(await client.callTool({ name: 'echo', arguments: { text: 'hi' } })));
    await step('slow', async () => {
        const seen = [];
        const r = await client.callTool({ name: 'slow', arguments: { ms: 150 } }, { onprogress: (p) => seen.push(p.progress) });
        return { text: text(r), progress: seen };
    });
    await step('resources', async () => (await client.listResources()).resources.map((r) => r.uri).sort());
    await step('read', async () => (await client.readResource({ uri: 'file:///public/readme.txt' })).contents[0].text);
    await step('prompt', async () => (await client.getPrompt({ name: 'greet', arguments: { who: 'Ada' } })).messages[0].content.text);
    await step('delete', async () => text(await client.callTool({ name: 'delete_note', arguments: { id: 'n1' } })));
    await step('summary', async () => text(await client.callTool({ name: 'summarize', arguments: { text: 'a long text' } })));
    await step('roots', async () => text(await client.callTool({ name: 'roots', arguments: {} })));
    await step('twice', async () => text(await client.callTool({ name: 'ask_twice', arguments: {} })));
    const seen = [];
    client.setNotificationHandler('notifications/tools/list_changed', () => seen.push('tools'));
    client.setNotificationHandler('notifications/resources/updated', (n) => seen.push(`updated ${n.params.uri}`));
    await step('listen', async () => {
        const sub = await client.listen({ toolsListChanged: true, resourceSubscriptions: ['file:///public/readme.txt'] });
        out.acknowledged = sub.acknowledged ?? null;
        await client.callTool({ name: 'touch', arguments: { uri: 'file:///public/readme.txt' } });
        const deadline = Date.now() + 5000;
        while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        await sub.close();
        return seen.sort();
    });
} else {
    await step('delete', async () => text(await client.callTool({ name: 'delete_note', arguments: { id: 'n2' } })));
}
out.asked = asked;
console.log(JSON.stringify(out));
await client.close();
process.exit(0);
