// An MCP server (TypeScript SDK, low-level Server API) with every fixture the pinned
// conformance suite's server scenarios call: tools that answer text, image, audio,
// embedded resources, errors, logs, progress, sampling and elicitation; a tool that cuts
// its SSE stream mid-call for the client to resume with Last-Event-ID; resources, a
// resource template and prompts; completion and logging. Stateful sessions, each with
// its own Server and an in-memory event store. Host and Origin must name a loopback
// address, as a local MCP server's must (DNS rebinding).
//
// usage: node conformance_server.mjs PORT [sse|json|standalone]
//   sse (default): requests answered as SSE streams with priming events; what a tool asks
//     the client (sampling, elicitation) goes on the stream of the call that asks;
//   json: answered with a single JSON body where the SDK allows it (what a tool sends
//     before its answer is then lost: the logging, progress, sampling and elicitation
//     scenarios fail, directly too);
//   standalone: as sse, but what a tool asks the client goes on the session's GET
//     stream, so the call only works if that stream was open before the call came.

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ListRootsResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest
} from '@modelcontextprotocol/sdk/types.js';

const port = Number(process.argv[2]);
const mode = process.argv[3] ?? 'sse';
if (!['sse', 'json', 'standalone'].includes(mode)) {
  console.error('usage: node conformance_server.mjs PORT [sse|json|standalone]');
  process.exit(2);
}
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node conformance_server.mjs PORT [sse|json|standalone]');
  process.exit(2);
}

// A 1×1 transparent PNG and a silent 8-sample WAV (mono, 8 kHz, 8-bit).
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
const WAV = Buffer.concat([
  Buffer.from('RIFF'),
  u32(36 + 8),
  Buffer.from('WAVEfmt '),
  u32(16),
  u16(1), // PCM
  u16(1), // mono
  u32(8000),
  u32(8000),
  u16(1),
  u16(8),
  Buffer.from('data'),
  u32(8),
  Buffer.alloc(8, 0x80)
]).toString('base64');

function u32(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}
function u16(n) {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(n);
  return b;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ type: 'text', text: t });
const noArgs = { type: 'object', properties: {} };

const TOOLS = [
  { name: 'test_simple_text', description: 'Answers with one text item.', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Answers with a PNG image.', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Answers with a WAV clip.', inputSchema: noArgs },
  {
    name: 'test_embedded_resource',
    description: 'Answers with an embedded text resource.',
    inputSchema: noArgs
  },
  {
    name: 'test_multiple_content_types',
    description: 'Answers with text, an image and a resource.',
    inputSchema: noArgs
  },
  {
    name: 'test_tool_with_logging',
    description: 'Sends three log messages while it runs.',
    inputSchema: noArgs
  },
  {
    name: 'test_tool_with_progress',
    description: 'Reports progress 0, 50 and 100 of 100.',
    inputSchema: noArgs
  },
  { name: 'test_error_handling', description: 'Always fails as a tool.', inputSchema: noArgs },
  {
    name: 'test_sampling',
    description: 'Asks the client for an LLM completion.',
    inputSchema: {
      type: 'object',
      properties: { prompt: { type: 'string', description: 'what to ask the model' } },
      required: ['prompt']
    }
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user for a name and an email address.',
    inputSchema: {
      type: 'object',
      properties: { message: { type: 'string', description: 'what to show the user' } },
      required: ['message']
    }
  },
  {
    name: 'test_elicitation_sep1034_defaults',
    description: 'Elicits fields of every primitive type, each with a default.',
    inputSchema: noArgs
  },
  {
    name: 'test_elicitation_sep1330_enums',
    description: 'Elicits the five kinds of enum field.',
    inputSchema: noArgs
  },
  {
    name: 'test_reconnection',
    description: 'Closes its SSE stream before answering; the answer comes on resumption.',
    inputSchema: noArgs
  },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: {
          $anchor: 'addressAnchor',
          type: 'object',
          properties: { street: { type: 'string' }, city: { type: 'string' } }
        }
      },
      properties: {
        name: { type: 'string' },
        address: { $ref: '#/$defs/address' },
        contact: { anyOf: [{ type: 'string', format: 'email' }, { type: 'string', pattern: '^\\+[0-9]+$' }] },
        kind: { type: 'string', enum: ['person', 'company'] }
      },
      allOf: [{ required: ['name'] }, { anyOf: [{ required: ['contact'] }, { required: ['address'] }] }],
      if: { properties: { kind: { const: 'company' } } },
      then: { required: ['address'] },
      else: {},
      additionalProperties: false
    }
  },
  // The 2026-07-28 suite's diagnostic tools, as a legacy server has them.
  {
    name: 'test_missing_capability',
    description: 'Asks the model, whatever the client declared.',
    inputSchema: noArgs
  },
  {
    name: 'test_streaming_elicitation',
    description: 'Asks the user on the call\'s stream.',
    inputSchema: noArgs
  },
  { name: 'test_logging_tool', description: 'Logs at info and warning, then answers.', inputSchema: noArgs },
  {
    name: 'test_custom_headers',
    description: 'Says where a query runs; the region is mirrored in Mcp-Param-Region.',
    inputSchema: {
      type: 'object',
      properties: { region: { type: 'string', 'x-mcp-header': 'Region' }, query: { type: 'string' } },
      required: ['region', 'query']
    }
  }
];

const RESOURCES = [
  {
    uri: 'test://static-text',
    name: 'static-text',
    description: 'A fixed text resource.',
    mimeType: 'text/plain'
  },
  {
    uri: 'test://static-binary',
    name: 'static-binary',
    description: 'A fixed PNG image.',
    mimeType: 'image/png'
  },
  {
    uri: 'test://watched-resource',
    name: 'watched-resource',
    description: 'A resource clients may subscribe to.',
    mimeType: 'text/plain'
  }
];

// The 2026-07-28 suite's input tools, asking the legacy way (a request to the client on the
// call's stream, its answer awaited): what a legacy server does that mcpgate's bridge turns
// into `input_required` rounds for a 2026-07-28 client.
const ASKING = [
  ['test_input_required_result_elicitation', 'Asks the user for a name.'],
  ['test_input_required_result_sampling', 'Asks the model a question.'],
  ['test_input_required_result_list_roots', 'Asks the client for its roots.'],
  ['test_input_required_result_request_state', 'Asks for a confirmation; says state-ok after it.'],
  ['test_input_required_result_multiple_inputs', 'Asks a name, a completion and the roots, in turn.'],
  ['test_input_required_result_multi_round', 'Asks a name, then a colour.'],
  ['test_input_required_result_tampered_state', 'Asks for a confirmation.'],
  ['test_input_required_result_capabilities', 'Asks only what the client declared it can answer.']
];
for (const [name, description] of ASKING) TOOLS.push({ name, description, inputSchema: noArgs });

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments.' },
  { name: 'test_input_required_result_prompt', description: 'Asks the user for context first.' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt that quotes its two arguments.',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true }
    ]
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt that embeds the resource it is given.',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }]
  },
  { name: 'test_prompt_with_image', description: 'A prompt that carries an image.' }
];

async function callTool(name, args, extra) {
  switch (name) {
    case 'test_simple_text':
      return { content: [text('This is a simple text response for testing.')] };
    case 'test_image_content':
      return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
    case 'test_audio_content':
      return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
    case 'test_embedded_resource':
      return {
        content: [
          {
            type: 'resource',
            resource: {
              uri: 'test://embedded-resource',
              mimeType: 'text/plain',
              text: 'This is an embedded resource content.'
            }
          }
        ]
      };
    case 'test_multiple_content_types':
      return {
        content: [
          text('Multiple content types test:'),
          { type: 'image', data: PNG, mimeType: 'image/png' },
          {
            type: 'resource',
            resource: {
              uri: 'test://mixed-content-resource',
              mimeType: 'application/json',
              text: JSON.stringify({ test: 'data', value: 123 })
            }
          }
        ]
      };
    case 'test_tool_with_logging': {
      const log = (data) =>
        extra.sendNotification({
          method: 'notifications/message',
          params: { level: 'info', logger: 'conformance', data }
        });
      await log('Tool execution started');
      await sleep(50);
      await log('Tool processing data');
      await sleep(50);
      await log('Tool execution completed');
      return { content: [text('Logged three messages.')] };
    }
    case 'test_tool_with_progress': {
      const token = extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (token !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress, total: 100 }
          });
        }
        if (progress < 100) await sleep(50);
      }
      return { content: [text('Progress reported.')] };
    }
    case 'test_error_handling':
      return {
        isError: true,
        content: [text('This tool intentionally returns an error for testing')]
      };
    case 'test_sampling': {
      const answer = await extra.ask(
        {
          method: 'sampling/createMessage',
          params: {
            messages: [{ role: 'user', content: text(String(args.prompt ?? '')) }],
            maxTokens: 100
          }
        },
        CreateMessageResultSchema
      );
      const said = answer.content?.type === 'text' ? answer.content.text : JSON.stringify(answer.content);
      return { content: [text(`LLM response: ${said}`)] };
    }
    case 'test_elicitation': {
      const answer = await extra.ask(
        {
          method: 'elicitation/create',
          params: {
            message: String(args.message ?? ''),
            requestedSchema: {
              type: 'object',
              properties: {
                username: { type: 'string', description: "User's response" },
                email: { type: 'string', description: "User's email address" }
              },
              required: ['username', 'email']
            }
          }
        },
        ElicitResultSchema
      );
      return {
        content: [
          text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)
        ]
      };
    }
    case 'test_elicitation_sep1034_defaults':
      return elicitAndReport(extra, 'Review the defaults.', {
        name: { type: 'string', default: 'John Doe' },
        age: { type: 'integer', default: 30 },
        score: { type: 'number', default: 95.5 },
        status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
        verified: { type: 'boolean', default: true }
      });
    case 'test_elicitation_sep1330_enums':
      return elicitAndReport(extra, 'Pick from each list.', {
        untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
        titledSingle: {
          type: 'string',
          oneOf: [
            { const: 'value1', title: 'First Option' },
            { const: 'value2', title: 'Second Option' },
            { const: 'value3', title: 'Third Option' }
          ]
        },
        legacyEnum: {
          type: 'string',
          enum: ['opt1', 'opt2', 'opt3'],
          enumNames: ['Option One', 'Option Two', 'Option Three']
        },
        untitledMulti: {
          type: 'array',
          items: { type: 'string', enum: ['option1', 'option2', 'option3'] }
        },
        titledMulti: {
          type: 'array',
          items: {
            anyOf: [
              { const: 'value1', title: 'First Choice' },
              { const: 'value2', title: 'Second Choice' },
              { const: 'value3', title: 'Third Choice' }
            ]
          }
        }
      });
    case 'test_custom_headers':
      return { content: [text(`${args.query} in ${args.region}`)] };
    case 'test_missing_capability':
      return { content: [text(`The model said: ${await askModel(extra)}`)] };
    case 'test_streaming_elicitation':
      return { content: [text(`Hello, ${await askName(extra)}!`)] };
    case 'test_logging_tool': {
      for (const level of ['info', 'warning']) {
        await extra.sendNotification({ method: 'notifications/message', params: { level, data: `said at ${level}` } });
      }
      return { content: [text('Logged twice.')] };
    }
    case 'test_input_required_result_elicitation': {
      const name = await askName(extra);
      return { content: [text(`Hello, ${name}!`)] };
    }
    case 'test_input_required_result_sampling':
      return { content: [text(`The model said: ${await askModel(extra)}`)] };
    case 'test_input_required_result_list_roots':
      return { content: [text(`Roots: ${await askRoots(extra)}`)] };
    case 'test_input_required_result_request_state':
    case 'test_input_required_result_tampered_state': {
      const answer = await elicit(extra, 'Go on?', { ok: { type: 'boolean' } });
      return { content: [text(answer.action === 'accept' ? 'state-ok' : `declined (${answer.action})`)] };
    }
    case 'test_input_required_result_multiple_inputs': {
      const name = await askName(extra);
      const said = await askModel(extra);
      const roots = await askRoots(extra);
      return { content: [text(`${name}; ${said}; ${roots}`)] };
    }
    case 'test_input_required_result_multi_round': {
      const name = await askName(extra);
      const colour = await elicit(extra, `Your favourite colour, ${name}?`, { color: { type: 'string' } });
      return { content: [text(`${name} likes ${colour.content?.color ?? '?'}`)] };
    }
    case 'test_input_required_result_capabilities': {
      const declared = extra.clientCapabilities ?? {};
      if (declared.elicitation) return { content: [text(`Hello, ${await askName(extra)}!`)] };
      if (declared.sampling) return { content: [text(`The model said: ${await askModel(extra)}`)] };
      return { content: [text('Nothing could be asked.')] };
    }
    case 'test_reconnection':
      // Cut the POST stream after its priming event; the client comes back with a GET
      // carrying Last-Event-ID, and the answer is replayed there from the event store.
      extra.closeSSEStream?.();
      await sleep(100);
      return { content: [text('Answered after the stream was resumed.')] };
    case 'json_schema_2020_12_tool':
      return { content: [text(`Hello ${args.name ?? 'nobody'}`)] };
    default:
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
  }
}

// Asks the user `message` for a form of `properties`, all required.
function elicit(extra, message, properties) {
  return extra.ask(
    {
      method: 'elicitation/create',
      params: { message, requestedSchema: { type: 'object', properties, required: Object.keys(properties) } }
    },
    ElicitResultSchema
  );
}

async function askName(extra) {
  const answer = await elicit(extra, 'What is your name?', { name: { type: 'string' } });
  return answer.content?.name ?? `(${answer.action})`;
}

async function askModel(extra) {
  const answer = await extra.ask(
    {
      method: 'sampling/createMessage',
      params: {
        messages: [{ role: 'user', content: text('What is the capital of France?') }],
        maxTokens: 50
      }
    },
    CreateMessageResultSchema
  );
  return answer.content?.type === 'text' ? answer.content.text : JSON.stringify(answer.content);
}

async function askRoots(extra) {
  const answer = await extra.ask({ method: 'roots/list' }, ListRootsResultSchema);
  return answer.roots.map((r) => r.uri).join(' ');
}

async function elicitAndReport(extra, message, properties) {
  const answer = await extra.ask(
    { method: 'elicitation/create', params: { message, requestedSchema: { type: 'object', properties } } },
    ElicitResultSchema
  );
  return {
    content: [
      text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)
    ]
  };
}

function readResource(uri) {
  if (uri === 'test://static-text' || uri === 'test://watched-resource') {
    return {
      contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }]
    };
  }
  if (uri === 'test://static-binary') {
    return { contents: [{ uri, mimeType: 'image/png', blob: PNG }] };
  }
  const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
  if (m) {
    const id = decodeURIComponent(m[1]);
    return {
      contents: [
        {
          uri,
          mimeType: 'application/json',
          text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` })
        }
      ]
    };
  }
  throw new McpError(-32002, `Resource not found: ${uri}`, { uri });
}

function getPrompt(name, args) {
  switch (name) {
    case 'test_simple_prompt':
      return { messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }] };
    case 'test_prompt_with_arguments':
      return {
        messages: [
          {
            role: 'user',
            content: text(`Prompt with arguments: arg1='${args.arg1 ?? ''}', arg2='${args.arg2 ?? ''}'`)
          }
        ]
      };
    case 'test_prompt_with_embedded_resource':
      return {
        messages: [
          {
            role: 'user',
            content: {
              type: 'resource',
              resource: {
                uri: String(args.resourceUri ?? 'test://embedded'),
                mimeType: 'text/plain',
                text: 'Embedded resource content for testing.'
              }
            }
          },
          { role: 'user', content: text('Please process the embedded resource above.') }
        ]
      };
    case 'test_prompt_with_image':
      return {
        messages: [
          { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
          { role: 'user', content: text('Please analyze the image above.') }
        ]
      };
    default:
      throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${name}`);
  }
}

function newServer() {
  const server = new Server(
    { name: 'mcpgate-conformance-server', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: false },
        resources: { subscribe: true, listChanged: false },
        prompts: { listChanged: false },
        logging: {},
        completions: {}
      }
    }
  );
  const subscriptions = new Set();
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) =>
    callTool(req.params.name, req.params.arguments ?? {}, {
      ...extra,
      _meta: req.params._meta,
      clientCapabilities: server.getClientCapabilities(),
      // A request to the client: on the call's own stream, or unrelated to the call (the
      // session's GET stream) in standalone mode.
      ask: (request, schema) =>
        mode === 'standalone' ? server.request(request, schema) : extra.sendRequest(request, schema)
    })
  );
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'template-data',
        description: 'JSON data for any id.',
        mimeType: 'application/json'
      }
    ]
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => readResource(req.params.uri));
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    subscriptions.delete(req.params.uri);
    return {};
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (req, extra) => {
    if (req.params.name !== 'test_input_required_result_prompt') {
      return getPrompt(req.params.name, req.params.arguments ?? {});
    }
    const answer = await extra.sendRequest(
      {
        method: 'elicitation/create',
        params: {
          message: 'What context should the prompt use?',
          requestedSchema: { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] }
        }
      },
      ElicitResultSchema
    );
    return { messages: [{ role: 'user', content: text(`Use this context: ${answer.content?.context ?? ''}`) }] };
  });
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const typed = String(req.params.argument?.value ?? '');
    const values = ['paris', 'park', 'party', 'test', 'testing'].filter((v) => v.startsWith(typed));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

/// Events kept per session so a client can resume a cut stream: ids are
/// `<stream>_<sequence>`, and a resumption replays what came after on the same stream.
class EventLog {
  constructor() {
    this.events = [];
    this.next = 0;
  }
  async storeEvent(streamId, message) {
    const eventId = `${streamId}_${String(this.next++).padStart(8, '0')}`;
    this.events.push({ eventId, streamId, message });
    return eventId;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.find((e) => e.eventId === eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const at = this.events.findIndex((e) => e.eventId === lastEventId);
    if (at < 0) return '';
    const { streamId } = this.events[at];
    for (const e of this.events.slice(at + 1)) {
      if (e.streamId === streamId) await send(e.eventId, e.message);
    }
    return streamId;
  }
}

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

function hostOf(value) {
  try {
    return new URL(`http://${value}`).hostname;
  } catch {
    return undefined;
  }
}

function originHost(value) {
  try {
    return new URL(value).hostname;
  } catch {
    return undefined;
  }
}

function refuse(res, status, code, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } }));
}

const sessions = new Map();

async function readBody(req) {
  const parts = [];
  for await (const part of req) parts.push(part);
  return Buffer.concat(parts).toString('utf8');
}

const httpServer = http.createServer(async (req, res) => {
  try {
    if (!LOOPBACK.has(hostOf(req.headers.host ?? ''))) {
      return refuse(res, 403, -32000, 'Host not allowed');
    }
    if (req.headers.origin !== undefined && !LOOPBACK.has(originHost(req.headers.origin))) {
      return refuse(res, 403, -32000, 'Origin not allowed');
    }
    const path = new URL(req.url, 'http://localhost').pathname;
    if (path !== '/mcp') return refuse(res, 404, -32000, 'Not found');

    const sessionId = req.headers['mcp-session-id'];
    let body;
    if (req.method === 'POST') {
      const raw = await readBody(req);
      try {
        body = JSON.parse(raw);
      } catch {
        return refuse(res, 400, -32700, 'Parse error');
      }
    }
    if (sessionId !== undefined) {
      const transport = sessions.get(sessionId);
      if (!transport) return refuse(res, 404, -32001, 'Session not found');
      return await transport.handleRequest(req, res, body);
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return refuse(res, 400, -32000, 'Bad Request: no session');
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: mode === 'json',
      eventStore: new EventLog(),
      retryInterval: 500,
      onsessioninitialized: (id) => sessions.set(id, transport)
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await newServer().connect(transport);
    await transport.handleRequest(req, res, body);
  } catch (error) {
    if (!res.headersSent) refuse(res, 500, -32603, `Internal error: ${error?.message ?? error}`);
    else res.end();
  }
});

httpServer.listen(port, '127.0.0.1');
