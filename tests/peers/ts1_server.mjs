// A legacy (2025-11-25) MCP server on the TypeScript SDK v1, for mcpgate's bridge tests
// with 2026-07-28 clients: it speaks sessions only (a request without one is refused, as
// every SDK v1 server refuses it), and asks its client for input the legacy way, with
// requests on the call's stream.
// Over HTTP:  node ts1_server.mjs --port P [--record FILE]
// Over stdio: node ts1_server.mjs --stdio [--record FILE]
// With --record, every HTTP request is appended to FILE as one JSON line ({method,
// headers, body}), and what the tools did ({ran}, {cancelled}) too.
import http from 'node:http';
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
    CreateMessageResultSchema,
    ElicitResultSchema,
    ListRootsResultSchema,
    SubscribeRequestSchema,
    UnsubscribeRequestSchema,
    isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : dflt;
};
const record = opt('--record');
const note = (line) => record && fs.appendFileSync(record, JSON.stringify(line) + '\n');
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const confirmSchema = { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] };
const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };

function build() {
    const server = new McpServer(
        { name: 'ts1-fixture', version: '1.32.2' },
        {
            capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: {}, logging: {} },
            instructions: 'A legacy fixture.',
        },
    );
    const subscribed = new Set();
    server.server.setRequestHandler(SubscribeRequestSchema, async (req) => {
        subscribed.add(req.params.uri);
        return {};
    });
    server.server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
        subscribed.delete(req.params.uri);
        return {};
    });
    const ask = (extra, method, params, schema) => extra.sendRequest({ method, params }, schema);
    server.registerTool('echo', { description: 'Echoes its text.', inputSchema: { text: z.string() } }, async ({ text: t }) =>
        text(`echo: ${t}`),
    );
    server.registerTool(
        'delete_note',
        { description: 'Deletes a note after the user confirms.', inputSchema: { id: z.string() }, annotations: { destructiveHint: true } },
        async ({ id }, extra) => {
            extra.signal.addEventListener('abort', () => note({ cancelled: 'delete_note', id }));
            const r = await ask(extra, 'elicitation/create', { message: `Delete note ${id}?`, requestedSchema: confirmSchema }, ElicitResultSchema);
            if (r.action === 'accept' && r.content?.confirm === true) {
                note({ ran: 'delete_note', id });
                return text(`deleted ${id}`);
            }
            return text(`kept ${id}`);
        },
    );
    server.registerTool('chatty', { description: 'Logs at three levels on its way.', inputSchema: {} }, async (_args, extra) => {
        for (const level of ['debug', 'info', 'warning']) {
            await extra.sendNotification({ method: 'notifications/message', params: { level, data: `said at ${level}` } });
        }
        return text('chatted');
    });
    server.registerTool('summarize', { description: 'Asks the client to sample a summary.', inputSchema: { text: z.string() } }, async ({ text: t }, extra) => {
        const r = await ask(
            extra,
            'sampling/createMessage',
            { messages: [{ role: 'user', content: { type: 'text', text: `Summarize: ${t}` } }], maxTokens: 50 },
            CreateMessageResultSchema,
        );
        return text(`summary: ${r.content.text}`);
    });
    server.registerTool('roots', { description: 'Asks the client for its roots.', inputSchema: {} }, async (_args, extra) => {
        const r = await ask(extra, 'roots/list', undefined, ListRootsResultSchema);
        return text(`roots: ${r.roots.map((x) => x.uri).join(' ')}`);
    });
    server.registerTool('ask_twice', { description: 'Asks a name, then a confirmation.', inputSchema: {} }, async (_args, extra) => {
        const a = await ask(extra, 'elicitation/create', { message: 'Your name?', requestedSchema: nameSchema }, ElicitResultSchema);
        const b = await ask(extra, 'elicitation/create', { message: `Sure, ${a.content?.name}?`, requestedSchema: confirmSchema }, ElicitResultSchema);
        if (b.action === 'accept') note({ ran: 'ask_twice' });
        return text(b.action === 'accept' ? `confirmed by ${a.content?.name}` : 'not confirmed');
    });
    server.registerTool('slow', { description: 'Reports progress, then answers.', inputSchema: { ms: z.number() } }, async ({ ms }, extra) => {
        const token = extra._meta?.progressToken;
        for (let i = 1; i <= 3; i++) {
            await new Promise((r) => setTimeout(r, ms / 3));
            if (token !== undefined) {
                await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: 3 } });
            }
        }
        return text(`slept ${ms}`);
    });
    server.registerTool('hang', { description: 'Waits until it is cancelled.', inputSchema: {} }, async (_args, extra) => {
        await new Promise((resolve) => {
            extra.signal.addEventListener('abort', () => {
                note({ cancelled: 'hang' });
                resolve();
            });
        });
        return text('cancelled');
    });
    server.registerTool('touch', { description: 'Announces a change to a resource and to the tool list.', inputSchema: { uri: z.string() } }, async ({ uri }) => {
        if (subscribed.has(uri)) await server.server.sendResourceUpdated({ uri });
        server.sendToolListChanged();
        return text(`touched ${uri}`);
    });
    for (const uri of ['file:///public/readme.txt', 'file:///secret/keys.txt']) {
        server.registerResource(uri.split('/').pop(), uri, { mimeType: 'text/plain' }, async () => ({
            contents: [{ uri, mimeType: 'text/plain', text: `contents of ${uri}` }],
        }));
    }
    server.registerPrompt('greet', { description: 'Greets someone.', argsSchema: { who: z.string() } }, async ({ who }) => ({
        messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${who}` } }],
    }));
    return server;
}

if (args.includes('--stdio')) {
    await build().connect(new StdioServerTransport());
} else {
    const sessions = new Map();
    const srv = http.createServer(async (req, res) => {
        const chunks = [];
        for await (const c of req) chunks.push(c);
        const raw = Buffer.concat(chunks).toString('utf8');
        note({ method: req.method, headers: req.headers, body: raw });
        const body = raw ? JSON.parse(raw) : undefined;
        const id = req.headers['mcp-session-id'];
        let transport = id && sessions.get(id);
        if (!transport) {
            if (id || req.method !== 'POST' || !isInitializeRequest(body)) {
                res.writeHead(id ? 404 : 400, { 'content-type': 'application/json' });
                res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: id ? 'Session not found' : 'Bad Request: No valid session ID provided' } }));
                return;
            }
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                onsessioninitialized: (sid) => sessions.set(sid, transport),
            });
            transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
            await build().connect(transport);
        }
        await transport.handleRequest(req, res, body);
    });
    srv.listen(Number(opt('--port', '0')), '127.0.0.1', () => console.log(`listening ${srv.address().port}`));
}
