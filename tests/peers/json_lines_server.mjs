// A 2026-07-28 server that answers `subscriptions/listen` as the conformance suite's
// reference server does: `Content-Type: application/json`, one JSON message per line, and
// the answer never ends (the acknowledgement, then a `notifications/tools/list_changed`
// every 200 ms until the client leaves). Every other request gets a plain JSON result.
// Usage: node json_lines_server.mjs --port P
import http from 'node:http';

const args = process.argv.slice(2);
const port = Number(args[args.indexOf('--port') + 1]);

http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    let msg = {};
    try { msg = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { /* no body */ }
    if (msg.method === 'subscriptions/listen') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const sub = { 'io.modelcontextprotocol/subscriptionId': `listen:${msg.id}` };
        res.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged', params: { _meta: sub } }) + '\n');
        let n = 0;
        const tick = setInterval(() => {
            n += 1;
            res.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: { _meta: sub, n } }) + '\n');
        }, 200);
        res.on('close', () => clearInterval(tick));
        return;
    }
    if (msg.method === 'server/discover') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { supportedVersions: ['2026-07-28'], capabilities: { tools: { listChanged: true } }, resultType: 'complete' } }));
        return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id ?? null, result: { resultType: 'complete' } }));
}).listen(port, '127.0.0.1', () => console.log(`listening ${port}`));
