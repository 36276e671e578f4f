// An MCP server (TypeScript SDK v1, legacy sessions) behind which every request must carry
// a JWT that mcpgate signed for the caller (docs/oauth.md): it fetches mcpgate's JWKS, checks
// each token with `jose` (signature, iss, aud, exp), refuses a request without a good one
// (401), and records what it saw. Its tool `whoami` answers with the verified subject.
// Usage: node jwt_upstream.mjs --port P --jwks URL --issuer ISS --audience AUD[,AUD…] --record FILE
// Each request is appended to FILE as one JSON line: {ok, method, sub, client_id, profile,
// jti, act, error, authorization} (authorization: the raw header, to check no client token
// came; method: the JSON-RPC method of a POST, else the HTTP method).
import http from 'node:http';
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const args = process.argv.slice(2);
const opt = (name) => args[args.indexOf(name) + 1];
const record = opt('--record');
const note = (line) => fs.appendFileSync(record, JSON.stringify(line) + '\n');
const jwks = createRemoteJWKSet(new URL(opt('--jwks')), { cacheMaxAge: 1000, cooldownDuration: 0 });

function build() {
    const server = new McpServer({ name: 'jwt-upstream', version: '1.0.0' });
    server.registerTool('whoami', { description: 'Says who the token names.' }, async (extra) => ({
        content: [{ type: 'text', text: JSON.stringify(extra.authInfo?.extra ?? null) }],
    }));
    return server;
}

const sessions = new Map();
const srv = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString('utf8');
    const header = req.headers.authorization ?? '';
    let method = req.method;
    try { method = JSON.parse(raw).method ?? method; } catch { /* not JSON: the HTTP method */ }
    let claims;
    try {
        if (!header.startsWith('Bearer ')) throw new Error('no bearer token');
        ({ payload: claims } = await jwtVerify(header.slice(7), jwks, {
            issuer: opt('--issuer'),
            audience: opt('--audience').split(','),
        }));
    } catch (e) {
        note({ ok: false, method, error: String(e.code ?? e.message), authorization: header });
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'bad identity token' } }));
        return;
    }
    note({ ok: true, method, sub: claims.sub, client_id: claims.client_id ?? null, profile: claims.profile ?? null, act: claims.act ?? null, jti: claims.jti, exp: claims.exp, iat: claims.iat, authorization: header });
    req.auth = { token: header.slice(7), clientId: claims.client_id ?? '', scopes: [], extra: { sub: claims.sub, profile: claims.profile ?? null } };
    const body = raw ? JSON.parse(raw) : undefined;
    const id = req.headers['mcp-session-id'];
    let transport = id && sessions.get(id);
    if (!transport) {
        if (id || req.method !== 'POST' || !isInitializeRequest(body)) {
            res.writeHead(id ? 404 : 400, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'no session' } }));
            return;
        }
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (sid) => sessions.set(sid, transport),
        });
        await build().connect(transport);
    }
    await transport.handleRequest(req, res, body);
});
srv.listen(Number(opt('--port')), '127.0.0.1', () => console.log(`listening ${srv.address().port}`));
