// The fixture server for the conformance suite's 2026-07-28 server scenarios
// (@modelcontextprotocol/conformance 0.2.0-alpha.12), on the TypeScript SDK v2: stateless,
// modern only (`legacy: 'reject'`). It has what the scenarios call: the content tools,
// progress, errors, the multi round-trip tools (elicitation, sampling, roots, several
// inputs, several rounds, a state the server must vouch for, capability checks), a tool
// whose argument is mirrored in Mcp-Param-Region, tools that change the tool and prompt
// lists, resources, a template, prompts (one needing input) and completion, and the tasks
// extension (tasks_ext.mjs).
//
// usage: node conformance2_server.mjs --port P [--record FILE]  (over HTTP; prints "listening P";
//                                                  each POST's mcp-name and body go to FILE)
//        node conformance2_server.mjs --stdio                  (over stdio)
import http from 'node:http';
import fs from 'node:fs';
import crypto from 'node:crypto';
import {
    McpServer,
    ResourceTemplate,
    ProtocolError,
    MissingRequiredClientCapabilityError,
    createMcpHandler,
    fromJsonSchema,
    inputRequired,
    completable,
} from '@modelcontextprotocol/server';
import * as z from 'zod/v4';
import * as tasksExt from './tasks_ext.mjs';

const args = process.argv.slice(2);
const opt = (name) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
};

// A 1×1 PNG and a WAV header with two samples.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQIAAACAgA==';

const text = (t) => ({ type: 'text', text: t });
const answer = (t) => ({ content: [text(t)] });
const schema = (properties, required = []) => fromJsonSchema({ type: 'object', properties, required });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// requestState this server vouches for: payload.mac, HMAC-SHA256 under a key of this process.
const KEY = crypto.randomBytes(32);
const mac = (payload) => crypto.createHmac('sha256', KEY).update(payload).digest('base64url');
const seal = (payload) => `${Buffer.from(payload).toString('base64url')}.${mac(payload)}`;
function unseal(state) {
    const [body, tag] = String(state ?? '').split('.');
    if (!body || !tag) return null;
    const payload = Buffer.from(body, 'base64url').toString('utf8');
    const want = Buffer.from(mac(payload));
    const got = Buffer.from(tag);
    return want.length === got.length && crypto.timingSafeEqual(want, got) ? payload : null;
}

const askName = (message, field = 'name') =>
    inputRequired.elicit({
        message,
        requestedSchema: { type: 'object', properties: { [field]: { type: 'string' } }, required: [field] },
    });
const responses = (ctx) => ctx.mcpReq.inputResponses ?? {};
const state = (ctx) => {
    const s = ctx.mcpReq.requestState?.();
    return typeof s === 'string' ? s : undefined;
};
const capabilities = (ctx) => ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'] ?? {};

// Change events for listen streams (HTTP: the handler's notifier; stdio: the instance).
let notify = null;

function build() {
    const server = new McpServer(
        { name: 'mcpgate-conformance-2026', version: '1.0.0' },
        {
            capabilities: {
                tools: { listChanged: true },
                resources: { subscribe: true, listChanged: true },
                prompts: { listChanged: true },
                logging: {},
                completions: {},
                extensions: { [tasksExt.TASKS]: {} },
            },
        },
    );
    const tool = (name, description, handler, inputSchema = schema({})) =>
        server.registerTool(name, { description, inputSchema }, handler);

    tool('test_simple_text', 'Answers with one text item.', async () => answer('This is a simple text response for testing.'));
    tool('test_image_content', 'Answers with a PNG image.', async () => ({
        content: [{ type: 'image', data: PNG, mimeType: 'image/png' }],
    }));
    tool('test_audio_content', 'Answers with a WAV clip.', async () => ({
        content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }],
    }));
    tool('test_embedded_resource', 'Answers with an embedded text resource.', async () => ({
        content: [
            {
                type: 'resource',
                resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
            },
        ],
    }));
    tool('test_multiple_content_types', 'Answers with text, an image and a resource.', async () => ({
        content: [
            text('Multiple content types test:'),
            { type: 'image', data: PNG, mimeType: 'image/png' },
            {
                type: 'resource',
                resource: {
                    uri: 'test://mixed-content-resource',
                    mimeType: 'application/json',
                    text: JSON.stringify({ test: 'data', value: 123 }),
                },
            },
        ],
    }));
    tool('test_error_handling', 'Always fails as a tool.', async () => ({
        isError: true,
        content: [text('This tool intentionally returns an error for testing')],
    }));
    tool(
        'test_tool_with_progress',
        'Reports progress 0, 50 and 100 of 100.',
        async (_a, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            for (const progress of [0, 50, 100]) {
                if (token !== undefined) {
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100 } });
                }
                if (progress < 100) await sleep(50);
            }
            return answer(String(token ?? 'no token'));
        },
        schema({}),
    );
    for (const name of ['test_tool_with_logging', 'test_logging_tool']) {
        tool(
            name,
            'Logs three messages while it runs (only at the level the request asks for).',
            async (_a, ctx) => {
                for (const m of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
                    await ctx.mcpReq.log('info', m, 'conformance');
                    await sleep(20);
                }
                return answer('Logged.');
            },
            schema({}),
        );
    }
    tool('test_missing_capability', 'Needs the client to be able to sample.', async (_a, ctx) => {
        if (!capabilities(ctx).sampling) {
            throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { sampling: {} } }, 'This tool needs sampling');
        }
        return { resultType: 'input_required', inputRequests: { q: inputRequired.createMessage({ messages: [{ role: 'user', content: text('hi') }], maxTokens: 5 }) } };
    });
    tool('test_streaming_elicitation', 'Asks for a name as an input_required result.', async (_a, ctx) => {
        const r = responses(ctx).name;
        if (r) return answer(`Hello, ${r.content?.name}!`);
        return inputRequired({ inputRequests: { name: askName('What is your name?') } });
    });
    tool('test_trigger_tool_change', 'Adds a tool, so the tool list changes.', async () => {
        const name = `added_${crypto.randomUUID().slice(0, 8)}`;
        server.registerTool(name, { description: 'Added at run time.' }, async () => answer('added'));
        if (notify) notify.toolsChanged();
        else server.sendToolListChanged();
        return answer(`added ${name}`);
    });
    tool('test_trigger_prompt_change', 'Adds a prompt, so the prompt list changes.', async () => {
        const name = `added_${crypto.randomUUID().slice(0, 8)}`;
        server.registerPrompt(name, { description: 'Added at run time.' }, async () => ({ messages: [{ role: 'user', content: text('added') }] }));
        if (notify) notify.promptsChanged();
        else server.sendPromptListChanged();
        return answer(`added ${name}`);
    });
    tool(
        'test_custom_headers',
        'Says where a query runs; the region is mirrored in Mcp-Param-Region.',
        async ({ region, query }) => answer(`${query} in ${region}`),
        schema({ region: { type: 'string', 'x-mcp-header': 'Region' }, query: { type: 'string' } }, ['region', 'query']),
    );
    server.registerTool(
        'json_schema_2020_12_tool',
        {
            description: 'Tool with JSON Schema 2020-12 features',
            inputSchema: fromJsonSchema({
                $schema: 'https://json-schema.org/draft/2020-12/schema',
                type: 'object',
                $defs: {
                    address: {
                        $anchor: 'addressAnchor',
                        type: 'object',
                        properties: { street: { type: 'string' }, city: { type: 'string' } },
                    },
                },
                properties: {
                    name: { type: 'string' },
                    address: { $ref: '#/$defs/address' },
                    contact: { anyOf: [{ type: 'string', format: 'email' }, { type: 'string', pattern: '^\\+[0-9]+$' }] },
                    kind: { type: 'string', enum: ['person', 'company'] },
                },
                allOf: [{ required: ['name'] }, { anyOf: [{ required: ['contact'] }, { required: ['address'] }] }],
                if: { properties: { kind: { const: 'company' } } },
                then: { required: ['address'] },
                else: {},
                additionalProperties: false,
            }),
        },
        async ({ name }) => answer(`Hello ${name ?? 'nobody'}`),
    );

    // The 2025-11-25 suite's input tools, as a server of 2026-07-28 writes them (multi
    // round-trip): what a legacy client bridged by mcpgate is asked on its call's stream.
    const elicited = (a) => `action=${a.action}, content=${JSON.stringify(a.content ?? {})}`;
    tool('test_sampling', 'Asks the client for an LLM completion.', async ({ prompt }, ctx) => {
        const r = responses(ctx).llm;
        if (r) return answer(`LLM response: ${r.content?.type === 'text' ? r.content.text : JSON.stringify(r.content)}`);
        return inputRequired({
            inputRequests: { llm: inputRequired.createMessage({ messages: [{ role: 'user', content: text(String(prompt ?? '')) }], maxTokens: 100 }) },
        });
    }, schema({ prompt: { type: 'string' } }, ['prompt']));
    tool('test_elicitation', 'Asks the user for a name and an email address.', async ({ message }, ctx) => {
        const r = responses(ctx).user;
        if (r) return answer(`User response: ${elicited(r)}`);
        return inputRequired({
            inputRequests: {
                user: inputRequired.elicit({
                    message: String(message ?? ''),
                    requestedSchema: {
                        type: 'object',
                        properties: { username: { type: 'string', description: "User's response" }, email: { type: 'string', description: "User's email address" } },
                        required: ['username', 'email'],
                    },
                }),
            },
        });
    }, schema({ message: { type: 'string' } }, ['message']));
    const elicitAll = (name, message, properties) =>
        tool(name, message, async (_a, ctx) => {
            const r = responses(ctx).form;
            if (r) return answer(`Elicitation completed: ${elicited(r)}`);
            return inputRequired({ inputRequests: { form: inputRequired.elicit({ message, requestedSchema: { type: 'object', properties } }) } });
        });
    elicitAll('test_elicitation_sep1034_defaults', 'Review the defaults.', {
        name: { type: 'string', default: 'John Doe' },
        age: { type: 'integer', default: 30 },
        score: { type: 'number', default: 95.5 },
        status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
        verified: { type: 'boolean', default: true },
    });
    elicitAll('test_elicitation_sep1330_enums', 'Pick from each list.', {
        untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
        titledSingle: {
            type: 'string',
            oneOf: [
                { const: 'value1', title: 'First Option' },
                { const: 'value2', title: 'Second Option' },
                { const: 'value3', title: 'Third Option' },
            ],
        },
        legacyEnum: { type: 'string', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
        untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
        titledMulti: {
            type: 'array',
            items: {
                anyOf: [
                    { const: 'value1', title: 'First Choice' },
                    { const: 'value2', title: 'Second Choice' },
                    { const: 'value3', title: 'Third Choice' },
                ],
            },
        },
    });

    // Multi round-trip tools.
    tool('test_input_required_result_elicitation', 'Asks for a name, then greets it.', async (_a, ctx) => {
        const r = responses(ctx).user_name;
        if (r?.action === 'accept' && typeof r.content?.name === 'string') return answer(`Hello, ${r.content.name}!`);
        if (r && typeof r !== 'object') throw new ProtocolError(-32602, 'user_name must be an elicitation result');
        return inputRequired({ inputRequests: { user_name: askName('What is your name?') } });
    });
    tool('test_input_required_result_sampling', 'Asks the model a question.', async (_a, ctx) => {
        const r = responses(ctx).capital_question;
        if (r) return answer(`The model said: ${r.content?.text ?? JSON.stringify(r.content)}`);
        return inputRequired({
            inputRequests: {
                capital_question: inputRequired.createMessage({
                    messages: [{ role: 'user', content: text('What is the capital of France?') }],
                    maxTokens: 100,
                }),
            },
        });
    });
    tool('test_input_required_result_list_roots', 'Asks for the client roots.', async (_a, ctx) => {
        const r = responses(ctx).client_roots;
        if (r) return answer(`Roots: ${(r.roots ?? []).map((x) => x.uri).join(', ')}`);
        return inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
    });
    tool('test_input_required_result_request_state', 'Asks for a confirmation and keeps a state.', async (_a, ctx) => {
        const r = responses(ctx).confirm;
        if (r) {
            if (unseal(state(ctx)) !== 'confirm') throw new ProtocolError(-32602, 'requestState does not verify');
            return answer(`state-ok: confirmed=${r.content?.ok}`);
        }
        return inputRequired({
            inputRequests: {
                confirm: inputRequired.elicit({
                    message: 'Please confirm',
                    requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
                }),
            },
            requestState: seal('confirm'),
        });
    });
    tool('test_input_required_result_multiple_inputs', 'Asks three things at once.', async (_a, ctx) => {
        const r = responses(ctx);
        if (r.user_name && r.greeting && r.client_roots && unseal(state(ctx)) === 'multiple') {
            return answer(`Got name ${r.user_name.content?.name}, greeting and ${(r.client_roots.roots ?? []).length} roots`);
        }
        return inputRequired({
            inputRequests: {
                user_name: askName('What is your name?'),
                greeting: inputRequired.createMessage({
                    messages: [{ role: 'user', content: text('Generate a greeting') }],
                    maxTokens: 50,
                }),
                client_roots: inputRequired.listRoots(),
            },
            requestState: seal('multiple'),
        });
    });
    tool('test_input_required_result_multi_round', 'Asks twice, then answers.', async (_a, ctx) => {
        const r = responses(ctx);
        const s = unseal(state(ctx));
        if (s === 'round-2' && r.step2) return answer(`Name ${r.step2 && s}: color ${r.step2.content?.color}`);
        if (s === 'round-1' && r.step1) {
            return inputRequired({
                inputRequests: { step2: askName('Step 2: What is your favorite color?', 'color') },
                requestState: seal('round-2'),
            });
        }
        return inputRequired({ inputRequests: { step1: askName('Step 1: What is your name?') }, requestState: seal('round-1') });
    });
    tool('test_input_required_result_tampered_state', 'Refuses a state it did not make.', async (_a, ctx) => {
        if (state(ctx) !== undefined) {
            if (unseal(state(ctx)) !== 'untampered') throw new ProtocolError(-32602, 'requestState failed its integrity check');
            return answer('state verified');
        }
        return inputRequired({ inputRequests: { ok: askName('Anything?', 'ok') }, requestState: seal('untampered') });
    });
    tool('test_input_required_result_capabilities', 'Asks only what the client can answer.', async (_a, ctx) => {
        const r = responses(ctx);
        if (Object.keys(r).length > 0) return answer('thanks');
        const caps = capabilities(ctx);
        const inputRequests = {};
        if (caps.elicitation) inputRequests.user_name = askName('What is your name?');
        if (caps.sampling) {
            inputRequests.greeting = inputRequired.createMessage({ messages: [{ role: 'user', content: text('Say hi') }], maxTokens: 20 });
        }
        if (caps.roots) inputRequests.client_roots = inputRequired.listRoots();
        if (Object.keys(inputRequests).length === 0) return answer('nothing to ask this client');
        return inputRequired({ inputRequests });
    });

    // Resources.
    const fixed = (uri, mimeType, content) =>
        server.registerResource(uri.slice('test://'.length), uri, { mimeType }, async () => ({ contents: [{ uri, mimeType, ...content }] }));
    fixed('test://static-text', 'text/plain', { text: 'This is the content of the static text resource.' });
    fixed('test://static-binary', 'image/png', { blob: PNG });
    fixed('test://watched-resource', 'text/plain', { text: 'Watched resource content' });
    server.registerResource(
        'template',
        new ResourceTemplate('test://template/{id}/data', { list: undefined }),
        { mimeType: 'application/json' },
        async (uri, { id }) => ({
            contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }],
        }),
    );

    // Prompts.
    const says = (t) => ({ messages: [{ role: 'user', content: text(t) }] });
    server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments.' }, async () =>
        says('This is a simple prompt for testing.'),
    );
    server.registerPrompt(
        'test_prompt_with_arguments',
        {
            description: 'A prompt that quotes its two arguments.',
            argsSchema: z.object({
                arg1: completable(z.string().describe('First test argument'), (v) => ['paris', 'park', 'party'].filter((w) => w.startsWith(v ?? ''))),
                arg2: z.string().describe('Second test argument'),
            }),
        },
        async ({ arg1, arg2 }) => says(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`),
    );
    server.registerPrompt(
        'test_prompt_with_embedded_resource',
        { description: 'A prompt that embeds the resource it is given.', argsSchema: z.object({ resourceUri: z.string() }) },
        async ({ resourceUri }) => ({
            messages: [
                { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
                { role: 'user', content: text('Please process the embedded resource above.') },
            ],
        }),
    );
    server.registerPrompt('test_prompt_with_image', { description: 'A prompt that carries an image.' }, async () => ({
        messages: [
            { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
            { role: 'user', content: text('Please analyze the image above.') },
        ],
    }));
    server.registerPrompt('test_input_required_result_prompt', { description: 'A prompt that asks for its context first.' }, async (ctx) => {
        const r = ctx?.mcpReq ? responses(ctx).user_context : undefined;
        if (r) return says(`Use this context: ${r.content?.context}`);
        return inputRequired({
            inputRequests: {
                user_context: inputRequired.elicit({
                    message: 'What context should the prompt use?',
                    requestedSchema: { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] },
                }),
            },
        });
    });
    // Two tools must answer with JSON-RPC errors, which McpServer turns into tool results:
    // they are checked before its tools/call handler runs.
    tool('greet', 'Greets, synchronously.', async ({ name }) => answer(`Hello, ${name}!`), schema({ name: { type: 'string' } }));
    // The tools that run as tasks: listed with their task support; their calls are
    // answered by tasks_ext.mjs.
    for (const [name, support] of Object.entries(tasksExt.TASK_TOOLS)) {
        const registered = server.registerTool(name, { description: `Runs as a task (${support}).`, inputSchema: schema({ seconds: { type: 'number' }, label: { type: 'string' } }) }, async () => answer('not reached'));
        registered.execution = { taskSupport: support };
    }
    const handlers = server.server._requestHandlers;
    const call = handlers.get('tools/call');
    handlers.set('tools/call', async (request, ctx) => {
        const name = request.params?.name;
        const asTask = tasksExt.callTool(name, request.params?.arguments ?? {}, capabilities(ctx), responses(ctx));
        if (asTask?.missingCapability) {
            throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { extensions: { [tasksExt.TASKS]: {} } } }, `${name} runs only as a task`);
        }
        if (asTask) return asTask.result;
        if (name === 'test_missing_capability' && !capabilities(ctx).sampling) {
            throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { sampling: {} } }, 'This tool needs sampling');
        }
        if (name === 'test_input_required_result_tampered_state' && state(ctx) !== undefined) {
            if (unseal(state(ctx)) !== 'untampered') {
                throw new ProtocolError(-32602, 'requestState failed its integrity check');
            }
        }
        return call(request, ctx);
    });
    return server;
}

if (args.includes('--stdio')) {
    const { serveStdio, StdioServerTransport } = await import('@modelcontextprotocol/server/stdio');
    serveStdio(() => build(), { legacy: 'reject', transport: tasksExt.wrapTransport(new StdioServerTransport()) });
} else {
    const handler = createMcpHandler(() => build(), { legacy: 'reject' });
    notify = handler.notify;
    const srv = http.createServer(async (req, res) => {
        // A local server without auth: only loopback names may reach it (DNS rebinding).
        const host = (req.headers.host ?? '').replace(/:\d+$/, '');
        const origin = req.headers.origin;
        const local = (h) => ['127.0.0.1', 'localhost', '[::1]'].includes(h);
        if (!local(host) || (origin && !local(new URL(origin).hostname))) {
            res.writeHead(403, { 'content-type': 'application/json' });
            return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Host or Origin not allowed' } }));
        }
        const chunks = [];
        for await (const c of req) chunks.push(c);
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) for (const one of [v].flat()) headers.append(k, one);
        const body = ['GET', 'HEAD'].includes(req.method) ? undefined : Buffer.concat(chunks);
        if (opt('--record') && body) {
            fs.appendFileSync(opt('--record'), JSON.stringify({ name: req.headers['mcp-name'] ?? null, body: body.toString('utf8') }) + '\n');
        }
        let message;
        try {
            message = body && JSON.parse(body.toString('utf8'));
        } catch {}
        if (message?.method === 'subscriptions/listen' && message.params?.notifications?.taskIds?.length) {
            return tasksExt.listen(message, res);
        }
        const early = tasksExt.serves(message) && (tasksExt.checkHeaders(req.headers, message) ?? tasksExt.answer(message));
        if (early) {
            res.writeHead(tasksExt.statusOf(early), { 'content-type': 'application/json' });
            return res.end(JSON.stringify(early));
        }
        const answer = await handler.fetch(new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body }));
        res.writeHead(answer.status, Object.fromEntries(answer.headers));
        if (!answer.body) return res.end();
        const reader = answer.body.getReader();
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
    srv.listen(Number(opt('--port') ?? 0), '127.0.0.1', () => console.log(`listening ${srv.address().port}`));
}
