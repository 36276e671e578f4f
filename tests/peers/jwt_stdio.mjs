// A stdio MCP server (TypeScript SDK v1) that mcpgate tells whom it serves (docs/oauth.md on a
// stdio upstream): MCPGATE_IDENTITY_TOKEN at its start, and the file MCPGATE_IDENTITY_TOKEN_FILE
// names, which mcpgate keeps fresh. Both are checked with `jose` against mcpgate's JWKS
// (JWKS_URL, ISSUER, AUDIENCE from its environment). The start token is checked at once,
// while it is fresh; the file is read and checked at each call.
// Its tool `whoami` answers {pid, start, file, file_path, env}: start and file are the
// verified claims with the key's kid ({error} when a check fails); env is the variables
// it was given, so a test can see that no caller's token is among them.
import fs from 'node:fs';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

const jwks = createRemoteJWKSet(new URL(process.env.JWKS_URL), { cacheMaxAge: 1000, cooldownDuration: 0 });

async function check(token) {
    try {
        const { payload, protectedHeader } = await jwtVerify(token ?? '', jwks, {
            issuer: process.env.ISSUER,
            audience: process.env.AUDIENCE,
        });
        return { ...payload, kid: protectedHeader.kid, alg: protectedHeader.alg };
    } catch (e) {
        return { error: String(e.code ?? e.message) };
    }
}

const atStart = check(process.env.MCPGATE_IDENTITY_TOKEN);
const file = process.env.MCPGATE_IDENTITY_TOKEN_FILE;

const server = new McpServer({ name: 'jwt-stdio', version: '1.0.0' });
server.registerTool('whoami', { description: 'Says whom mcpgate says this process serves.' }, async () => {
    let now;
    try {
        now = await check(fs.readFileSync(file, 'utf8'));
    } catch (e) {
        now = { error: String(e.code ?? e.message) };
    }
    const answer = { pid: process.pid, start: await atStart, file: now, file_path: file ?? null, env: process.env };
    return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
});
await server.connect(new StdioServerTransport());
