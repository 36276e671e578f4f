// A 2026-07-28 client (TypeScript SDK v2) of a federated route, for mcpgate's federation
// tests. Usage: node fed_client.mjs URL PLAN_JSON
// PLAN: {"calls": [[tool, args, "progress"?], ...], "reads": [uri, ...],
//        "prompts": [[name, args], ...], "listen": tool-to-call-while-listening?}
// It prints one JSON object: the discover answer, every tool (all pages) with the number
// of pages, the prompts, resources and templates, and what each call, read and prompt
// gave (or the error it got).
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);
const out = { calls: {}, reads: {}, prompts: {}, elicited: [] };

const client = new Client(
    { name: 'mcpgate-fed-test', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
client.setRequestHandler('elicitation/create', async (req) => {
    out.elicited.push(req.params.message);
    return { action: 'accept', content: { confirm: true } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const step = async (f) => {
    try {
        return await f();
    } catch (e) {
        return { error: e.code ?? null, message: String(e.message ?? e) };
    }
};
const texts = (r) => r.content?.map((c) => c.text).join('');

out.discover = await step(async () => {
    const d = await client.discover();
    return {
        versions: d.supportedVersions,
        capabilities: Object.keys(d.capabilities ?? {}).sort(),
        instructions: d.instructions ?? null,
    };
});
out.tools = await step(async () => {
    const names = [];
    let cursor;
    let pages = 0;
    do {
        const page = await client.listTools(cursor ? { cursor } : {});
        pages += 1;
        names.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
        if (page._meta?.['mcpgate/unavailable']) out.unavailable = page._meta['mcpgate/unavailable'];
    } while (cursor && pages < 50);
    return { names, pages };
});
out.prompt_names = await step(async () => (await client.listPrompts()).prompts.map((p) => p.name));
out.resources = await step(async () => (await client.listResources()).resources.map((r) => r.uri));
out.templates = await step(async () => (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate));
for (const [name, args, progress] of plan.calls ?? []) {
    out.calls[name] = await step(async () => {
        if (progress) {
            const seen = [];
            const r = await client.callTool({ name, arguments: args }, { onprogress: (p) => seen.push(p.progress) });
            return { text: texts(r), progress: seen, isError: r.isError ?? false };
        }
        const r = await client.callTool({ name, arguments: args });
        return r.isError ? { isError: true, text: texts(r) } : texts(r);
    });
}
for (const uri of plan.reads ?? []) {
    out.reads[uri] = await step(async () => (await client.readResource({ uri })).contents[0].text);
}
for (const [name, args] of plan.prompts ?? []) {
    out.prompts[name] = await step(async () => (await client.getPrompt({ name, arguments: args })).messages[0].content.text);
}
if (plan.listen) {
    const seen = [];
    client.setNotificationHandler('notifications/tools/list_changed', () => seen.push('tools'));
    out.listen = await step(async () => {
        const sub = await client.listen({ toolsListChanged: true });
        await client.callTool({ name: plan.listen[0], arguments: plan.listen[1] });
        const deadline = Date.now() + 3000;
        while (seen.length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        await sub.close();
        return seen;
    });
}
console.log(JSON.stringify(out));
await client.close();
process.exit(0);
