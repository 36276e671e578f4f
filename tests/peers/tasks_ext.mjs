// The tasks extension of MCP 2026-07-28 (io.modelcontextprotocol/tasks, SEP-2663) for our
// conformance fixture. The SDK v2 server can answer a tools/call with a CreateTaskResult,
// but it knows tasks/get, tasks/update and tasks/cancel only as 2025-11-25 methods and
// answers them -32601; so those three are served here, in front of the SDK: over HTTP
// (with the header checks a 2026-07-28 server owes) and over stdio (a wrapped transport).
//
// Tools that run as tasks (names as the suite's scenarios call them):
//   slow_compute {seconds, label}  sleeps, then answers; cancelled if asked while it runs
//   failing_job                     a tool error after ~1 s (task support required)
//   protocol_error_job              fails with a JSON-RPC error
//   confirm_delete                  asks one elicitation through tasks/get, then completes
//   multi_input                     asks two at once; each answer removes its key
//   test_tool_with_task             asks for a name by input_required first, then a task
// A subscriptions/listen naming taskIds is served here too: its acknowledgement, then a
// notifications/tasks whenever one of those tasks changes.
import crypto from 'node:crypto';

export const TASKS = 'io.modelcontextprotocol/tasks';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ type: 'text', text: t });
const now = () => new Date().toISOString();

/** Tools that run as tasks, and whether a client without the extension may call them
 *  (`optional`: run synchronously) or not (`required`: -32021). */
export const TASK_TOOLS = {
    slow_compute: 'optional',
    failing_job: 'required',
    protocol_error_job: 'optional',
    confirm_delete: 'optional',
    multi_input: 'optional',
    test_tool_with_task: 'required',
};

const tasks = new Map();
const watchers = new Set();

const declares = (capabilities) => capabilities?.extensions?.[TASKS] !== undefined;

function view(t) {
    const out = {
        taskId: t.taskId,
        status: t.status,
        createdAt: t.createdAt,
        lastUpdatedAt: t.lastUpdatedAt,
        ttlMs: t.ttlMs,
        pollIntervalMs: t.pollIntervalMs,
    };
    if (t.statusMessage) out.statusMessage = t.statusMessage;
    if (t.status === 'completed') out.result = { resultType: 'complete', ...t.result };
    if (t.status === 'failed') out.error = t.error;
    if (t.status === 'input_required') out.inputRequests = { ...t.inputRequests };
    return out;
}

function change(t, fields) {
    if (['completed', 'failed', 'cancelled'].includes(t.status)) return;
    Object.assign(t, fields, { lastUpdatedAt: now() });
    for (const w of watchers) w(t);
}

function create(work) {
    const t = {
        taskId: crypto.randomUUID(),
        status: 'working',
        createdAt: now(),
        lastUpdatedAt: now(),
        ttlMs: 600000,
        pollIntervalMs: 100,
        inputRequests: {},
        answers: {},
        waiting: new Map(),
    };
    tasks.set(t.taskId, t);
    // The work starts after the answer: a tasks/get right after it sees the task.
    setImmediate(() => work(t).catch((e) => change(t, { status: 'failed', error: { code: -32603, message: String(e) } })));
    return t;
}

/** Waits for the client's answer to `key`, asked by `request`. */
function ask(t, key, request) {
    t.inputRequests[key] = request;
    change(t, { status: 'input_required' });
    return new Promise((resolve) => t.waiting.set(key, resolve));
}

const elicit = (message, field) => ({
    method: 'elicitation/create',
    params: {
        mode: 'form',
        message,
        requestedSchema: { type: 'object', properties: { [field]: { type: 'string' } }, required: [field] },
    },
});

async function run(name, args, t, gathered) {
    switch (name) {
        case 'slow_compute': {
            const end = Date.now() + Number(args.seconds ?? 0) * 1000;
            while (Date.now() < end && t.status !== 'cancelled') await sleep(50);
            change(t, { status: 'completed', result: { content: [text(`computed ${args.label ?? ''}`)] } });
            return;
        }
        case 'failing_job':
            await sleep(1000);
            change(t, { status: 'completed', result: { isError: true, content: [text('the job failed')] } });
            return;
        case 'protocol_error_job':
            await sleep(200);
            change(t, { status: 'failed', error: { code: -32603, message: 'the job broke' } });
            return;
        case 'confirm_delete': {
            const r = await ask(t, 'confirm', elicit('Delete the file?', 'confirm'));
            change(t, { status: 'completed', result: { content: [text(`deleted: ${JSON.stringify(r)}`)] } });
            return;
        }
        case 'multi_input': {
            const [a, b] = await Promise.all([
                ask(t, 'first', elicit('First value?', 'first')),
                ask(t, 'second', elicit('Second value?', 'second')),
            ]);
            change(t, { status: 'completed', result: { content: [text(`got ${JSON.stringify([a, b])}`)] } });
            return;
        }
        case 'test_tool_with_task':
            await sleep(100);
            change(t, { status: 'completed', result: { content: [text(`Hello, ${gathered}!`)] } });
            return;
    }
}

/** The answer to a tools/call of a task tool, or undefined to let the SDK answer it.
 *  `capabilities` are the request's client capabilities; `responses` its inputResponses. */
export function callTool(name, args, capabilities, responses) {
    const support = TASK_TOOLS[name];
    if (!support) return undefined;
    if (!declares(capabilities)) {
        if (support === 'required') return { missingCapability: true };
        if (name !== 'slow_compute') return undefined;
        return { result: { content: [text(`computed ${args.label ?? ''}`)] } };
    }
    let gathered;
    if (name === 'test_tool_with_task') {
        const r = responses?.user_name;
        gathered = r?.content?.name ?? r?.content?.user_name;
        if (!gathered) {
            return {
                result: {
                    resultType: 'input_required',
                    inputRequests: { user_name: elicit('What is your name?', 'name') },
                },
            };
        }
    }
    const t = create((task) => run(name, args ?? {}, task, gathered));
    const { result, error, inputRequests, ...task } = view(t);
    return { result: { resultType: 'task', ...task } };
}

const rpcError = (id, code, message, data) => ({ jsonrpc: '2.0', id, error: { code, message, ...(data && { data }) } });

/** Whether `message` is one of the requests served here. */
export const serves = (message) => ['tasks/get', 'tasks/update', 'tasks/cancel'].includes(message?.method);

/** Answers a tasks/get, tasks/update or tasks/cancel request; undefined for another. */
export function answer(message) {
    if (!serves(message)) return undefined;
    const { id, params } = message;
    const capabilities = params?._meta?.['io.modelcontextprotocol/clientCapabilities'];
    if (!declares(capabilities)) {
        return rpcError(id, -32021, 'Missing required client capability', {
            requiredCapabilities: { extensions: { [TASKS]: {} } },
        });
    }
    const t = typeof params?.taskId === 'string' ? tasks.get(params.taskId) : undefined;
    if (!t) return rpcError(id, -32602, 'Unknown task');
    if (message.method === 'tasks/get') return { jsonrpc: '2.0', id, result: { resultType: 'complete', ...view(t) } };
    if (message.method === 'tasks/cancel') {
        change(t, { status: 'cancelled' });
        return { jsonrpc: '2.0', id, result: { resultType: 'complete' } };
    }
    const given = params.inputResponses;
    if (given === null || typeof given !== 'object' || Array.isArray(given)) {
        return rpcError(id, -32602, 'inputResponses must be an object');
    }
    for (const [key, value] of Object.entries(given)) {
        const resolve = t.waiting.get(key);
        if (!resolve) continue;
        t.waiting.delete(key);
        delete t.inputRequests[key];
        resolve(value);
    }
    if (t.status === 'input_required' && t.waiting.size === 0) change(t, { status: 'working' });
    return { jsonrpc: '2.0', id, result: { resultType: 'complete' } };
}

/** The HTTP status of an answer from `answer`. */
export const statusOf = (reply) =>
    reply.error && [-32020, -32021, -32022].includes(reply.error.code) ? 400 : 200;

/** Whether the headers of a 2026-07-28 request agree with its body (SEP-2243), for the
 *  methods served here; an error answer when they do not. */
export function checkHeaders(headers, message) {
    const decode = (v) => {
        const m = /^=\?base64\?(.*)\?=$/.exec(v ?? '');
        return m ? Buffer.from(m[1], 'base64').toString('utf8') : v;
    };
    const meta = message.params?._meta ?? {};
    const version = headers['mcp-protocol-version'];
    if (!version || version !== meta['io.modelcontextprotocol/protocolVersion']) {
        return rpcError(message.id, -32020, 'MCP-Protocol-Version does not match the body');
    }
    if (headers['mcp-method'] !== message.method) return rpcError(message.id, -32020, 'Mcp-Method does not match the body');
    if (decode(headers['mcp-name']) !== message.params?.taskId) {
        return rpcError(message.id, -32020, 'Mcp-Name does not match params.taskId');
    }
    if (meta['io.modelcontextprotocol/clientCapabilities'] === undefined) {
        return rpcError(message.id, -32602, 'params._meta lacks clientCapabilities');
    }
    return undefined;
}

/** Serves a listen stream for `taskIds` on `res` (an HTTP response): the acknowledgement
 *  names the known ones; each change of one of them is sent as notifications/tasks. */
export function listen(message, res) {
    const subscription = message.id;
    const wanted = (message.params?.notifications?.taskIds ?? []).filter((id) => tasks.has(id));
    const tag = { 'io.modelcontextprotocol/subscriptionId': subscription };
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const send = (m) => res.write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
    send({
        jsonrpc: '2.0',
        method: 'notifications/subscriptions/acknowledged',
        params: { notifications: { taskIds: wanted }, _meta: tag },
    });
    const watch = (t) => {
        if (wanted.includes(t.taskId)) {
            send({ jsonrpc: '2.0', method: 'notifications/tasks', params: { ...view(t), _meta: tag } });
        }
    };
    watchers.add(watch);
    res.on('close', () => watchers.delete(watch));
}

/** A stdio transport with the three task methods answered before the SDK sees them. */
export function wrapTransport(inner) {
    return {
        start: () => inner.start(),
        send: (m, o) => inner.send(m, o),
        close: () => inner.close(),
        get sessionId() {
            return inner.sessionId;
        },
        set onclose(f) {
            inner.onclose = f;
        },
        get onclose() {
            return inner.onclose;
        },
        set onerror(f) {
            inner.onerror = f;
        },
        get onerror() {
            return inner.onerror;
        },
        set onmessage(f) {
            inner.onmessage = (m, extra) => {
                const reply = answer(m);
                if (reply) inner.send(reply).catch(() => {});
                else f(m, extra);
            };
        },
        get onmessage() {
            return inner.onmessage;
        },
    };
}
