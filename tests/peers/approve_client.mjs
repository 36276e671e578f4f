// A client with an elicitation handler, for mcpgate's approval tests: the TypeScript SDK v1
// (legacy, in a session) or v2 (2026-07-28). Usage:
//   node approve_client.mjs URL v1|v2 ANSWER CALLS_JSON
// ANSWER is how it answers each elicitation: approve, decline (approve: false), reject (the
// decline action), cancel, extra (a field not asked), wrongtype ("yes" for the boolean),
// or none (it declares no elicitation). CALLS: [[tool, args], ...]. It prints one JSON
// object: the messages it was asked, and each call's text or error.
const [url, generation, answer, callsText] = process.argv.slice(2);
const calls = JSON.parse(callsText);
const out = { asked: [], calls: [] };

// `approve` says yes to any one-boolean form: mcpgate's (`approve`) and a server's own
// (its field, e.g. `confirm`).
const reply = (message, schema) => {
    out.asked.push(message);
    const field = Object.keys(schema?.properties ?? { approve: {} })[0] ?? 'approve';
    switch (answer) {
        case 'approve': return { action: 'accept', content: { [field]: true } };
        case 'decline': return { action: 'accept', content: { approve: false } };
        case 'reject': return { action: 'decline' };
        case 'cancel': return { action: 'cancel' };
        case 'extra': return { action: 'accept', content: { approve: true, path: '/etc/passwd' } };
        case 'wrongtype': return { action: 'accept', content: { approve: 'yes' } };
        default: throw new Error(`no answer ${answer}`);
    }
};
const capabilities = answer === 'none' ? {} : { elicitation: { form: {} } };

let client;
let transport;
if (generation === 'v1') {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const { ElicitRequestSchema } = await import('@modelcontextprotocol/sdk/types.js');
    client = new Client({ name: 'mcpgate-approve-v1', version: '1.0.0' }, { capabilities });
    if (answer !== 'none') {
        // v1 checks the answer against the form itself: answers it would refuse go raw.
        client.setRequestHandler(ElicitRequestSchema, async (req) => reply(req.params.message, req.params.requestedSchema));
    }
    transport = new StreamableHTTPClientTransport(new URL(url));
} else {
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    client = new Client(
        { name: 'mcpgate-approve-v2', version: '1.0.0' },
        { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    if (answer !== 'none') {
        client.setRequestHandler('elicitation/create', async (req) => reply(req.params.message, req.params.requestedSchema));
    }
    transport = new StreamableHTTPClientTransport(new URL(url));
}
await client.connect(transport);
for (const [name, args] of calls) {
    try {
        const r = await client.callTool({ name, arguments: args });
        out.calls.push({ text: r.content?.map((c) => c.text).join('') ?? null, isError: r.isError ?? false });
    } catch (e) {
        out.calls.push({ error: e.code ?? null, message: String(e.message ?? e), data: e.data ?? null });
    }
}
console.log(JSON.stringify(out));
await transport.terminateSession?.().catch(() => {});
await client.close();
