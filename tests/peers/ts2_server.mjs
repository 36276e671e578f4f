// A 2026-07-28 MCP server on the TypeScript SDK v2, for mcpgate's tests of the
// stateless protocol. Over HTTP:  node ts2_server.mjs --port P [--legacy reject|stateless]
// Over stdio:                     node ts2_server.mjs --stdio [--legacy serve|reject]
// With --record FILE, every request the server receives is appended to FILE as one JSON
// line ({method, name, headers, body}), so a test can show what reached the upstream.
import http from 'node:http';
import fs from 'node:fs';
import {
    McpServer,
    createMcpHandler,
    fromJsonSchema,
    inputRequired,
    acceptedContent,
} from '@modelcontextprotocol/server';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : dflt;
};
const record = opt('--record');
const note = (line) => record && fs.appendFileSync(record, JSON.stringify(line) + '\n');

const text = (t) => ({ content: [{ type: 'text', text: t }] });
const object = (properties, required = Object.keys(properties)) =>
    fromJsonSchema({ type: 'object', properties, required });

// The change-event side of the server: the HTTP handler's notifier, once it exists.
let notify = null;

function build() {
    const server = new McpServer(
        { name: 'ts2-fixture', version: '2.4.0' },
        { capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: { listChanged: true }, logging: {} } },
    );
    server.registerTool(
        'echo',
        {
            description: 'Echoes its text.',
            inputSchema: object({ text: { type: 'string' } }),
            annotations: { readOnlyHint: true },
        },
        async ({ text: t }) => text(`echo: ${t}`),
    );
    server.registerTool(
        'grüße',
        { description: 'A tool whose name is not ASCII.', inputSchema: object({ who: { type: 'string' } }) },
        async ({ who }) => text(`grüße, ${who}`),
    );
    server.registerTool(
        'delete_note',
        {
            description: 'Deletes a note after the user confirms.',
            inputSchema: object({ id: { type: 'string' } }),
            annotations: { destructiveHint: true },
        },
        async ({ id }, ctx) => {
            const answer = acceptedContent(ctx.mcpReq.inputResponses, 'confirm');
            if (answer?.confirm === true) {
                note({ ran: 'delete_note', id });
                return text(`deleted ${id}`);
            }
            // Declined or cancelled: the note stays.
            if (answer || ctx.mcpReq.inputResponses?.confirm) return text(`kept ${id}`);
            return inputRequired({
                inputRequests: {
                    confirm: inputRequired.elicit({
                        message: `Delete note ${id}?`,
                        requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
                    }),
                },
                requestState: `state-for-${id}`,
            });
        },
    );
    server.registerTool(
        'summarize',
        { description: 'Asks the client to sample a summary.', inputSchema: object({ text: { type: 'string' } }) },
        async ({ text: t }, ctx) => {
            const got = ctx.mcpReq.inputResponses?.summary;
            if (got?.content?.type === 'text') return text(`summary: ${got.content.text}`);
            return inputRequired({
                inputRequests: {
                    summary: inputRequired.createMessage({
                        messages: [{ role: 'user', content: { type: 'text', text: `Summarize: ${t}` } }],
                        maxTokens: 50,
                    }),
                },
            });
        },
    );
    server.registerTool(
        'roots',
        { description: 'Asks the client for its roots.', inputSchema: object({}) },
        async (_args, ctx) => {
            const got = ctx.mcpReq.inputResponses?.roots;
            if (Array.isArray(got?.roots)) return text(`roots: ${got.roots.map((r) => r.uri).join(' ')}`);
            return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
        },
    );
    server.registerTool(
        'ask_twice',
        { description: 'Asks a name, then a confirmation, in two rounds.', inputSchema: object({}) },
        async (_args, ctx) => {
            const r = ctx.mcpReq.inputResponses ?? {};
            const confirm = { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] };
            const name = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
            if (r.confirm?.action === 'accept') {
                note({ ran: 'ask_twice', round: 2 });
                const state = typeof ctx.mcpReq.requestState === 'function' ? ctx.mcpReq.requestState() : ctx.mcpReq.requestState;
                return text(`confirmed by ${state ?? '?'}`);
            }
            if (r.name?.action === 'accept') {
                return inputRequired({
                    inputRequests: { confirm: inputRequired.elicit({ message: `Sure, ${r.name.content.name}?`, requestedSchema: confirm }) },
                    requestState: String(r.name.content.name),
                });
            }
            return inputRequired({ inputRequests: { name: inputRequired.elicit({ message: 'Your name?', requestedSchema: name }) } });
        },
    );
    server.registerTool(
        'slow',
        { description: 'Reports progress, then answers.', inputSchema: object({ ms: { type: 'integer' } }) },
        async ({ ms }, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            for (let i = 1; i <= 3; i++) {
                await new Promise((r) => setTimeout(r, ms / 3));
                if (token !== undefined) {
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: 3 } });
                }
            }
            return text(`slept ${ms}`);
        },
    );
    server.registerTool(
        'chatty',
        { description: 'Logs at three levels on its way (sent only at or above the level asked for).', inputSchema: object({}) },
        async (_args, ctx) => {
            for (const level of ['debug', 'info', 'warning']) await ctx.mcpReq.log(level, `said at ${level}`);
            return text('chatted');
        },
    );
    server.registerTool(
        'touch',
        { description: 'Announces a change to a resource and to the tool list.', inputSchema: object({ uri: { type: 'string' } }) },
        async ({ uri }) => {
            if (notify) {
                notify.resourceUpdated(uri);
                notify.toolsChanged();
            } else {
                // Over stdio: the instance itself tells its listen subscriptions.
                await server.server.sendResourceUpdated({ uri });
                server.sendToolListChanged();
            }
            return text(`touched ${uri}`);
        },
    );
    server.registerTool(
        'where',
        {
            description: 'Says which region it was asked about; the region is mirrored in Mcp-Param-Region.',
            inputSchema: object({ region: { type: 'string', 'x-mcp-header': 'Region' }, what: { type: 'string' } }),
        },
        async ({ region, what }) => text(`${what} in ${region}`),
    );
    for (const uri of ['file:///public/readme.txt', 'file:///secret/keys.txt']) {
        server.registerResource(uri.split('/').pop(), uri, { mimeType: 'text/plain' }, async () => ({
            contents: [{ uri, mimeType: 'text/plain', text: `contents of ${uri}` }],
        }));
    }
    server.registerPrompt(
        'greet',
        { description: 'Greets someone.', argsSchema: object({ who: { type: 'string' } }) },
        async ({ who }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${who}` } }] }),
    );
    return server;
}

if (args.includes('--stdio')) {
    const { serveStdio } = await import('@modelcontextprotocol/server/stdio');
    // `reject`: a legacy `initialize` is refused with UnsupportedProtocolVersion (-32022).
    serveStdio(() => build(), { legacy: opt('--legacy', 'serve') });
} else {
    const handler = createMcpHandler(() => build(), { legacy: opt('--legacy', 'stateless') });
    notify = handler.notify;
    const port = Number(opt('--port', '0'));
    const srv = http.createServer(async (req, res) => {
        const chunks = [];
        for await (const c of req) chunks.push(c);
        const body = Buffer.concat(chunks);
        note({
            method: req.method,
            mcp_method: req.headers['mcp-method'],
            mcp_name: req.headers['mcp-name'],
            headers: req.headers,
            body: body.toString('utf8'),
        });
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) {
            for (const one of [v].flat()) headers.append(k, one);
        }
        const request = new Request(`http://127.0.0.1${req.url}`, {
            method: req.method,
            headers,
            body: ['GET', 'HEAD'].includes(req.method) ? undefined : body,
        });
        const answer = await handler.fetch(request);
        res.writeHead(answer.status, Object.fromEntries(answer.headers));
        if (!answer.body) return res.end();
        const reader = answer.body.getReader();
        req.on('close', () => reader.cancel().catch(() => {}));
        res.on('close', () => reader.cancel().catch(() => {}));
        try {
            for (;;) {
                const { done, value } = await reader.read();
                if (done) break;
                res.write(value);
            }
        } catch {}
        res.end();
    });
    srv.listen(port, '127.0.0.1', () => {
        console.log(`listening ${srv.address().port}`);
    });
}
