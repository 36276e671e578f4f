// The TypeScript MCP SDK client with its own OAuth support, as a real connector would use
// it against mcpgate: the 401 leads it to the protected resource metadata, from there to
// the provider (idp.mjs), which gives it a token; then it lists tools and calls one.
// usage: node ts_oauth_client.mjs URL client_credentials|authorization_code ISSUER
//
// The authorization-code flow runs headless: the provider grants login and consent at
// once, so the browser step is a few redirects, followed here with a cookie jar, ending
// at the redirect URI with the code. Registration is dynamic (RFC 7591), PKCE is S256.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, flow, issuer] = process.argv.slice(2);
const REDIRECT = "http://127.0.0.1:1/callback";

class HeadlessProvider {
  redirectUrl = REDIRECT;
  clientMetadata = {
    client_name: "mcpgate-headless-test",
    redirect_uris: [REDIRECT],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "none",
    application_type: "native",
  };
  clientInformation() { return this.info; }
  saveClientInformation(info) { this.info = info; }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
  redirectToAuthorization(authorizationUrl) { this.authorizationUrl = authorizationUrl; }
}

// Follows the provider's redirects from the authorization URL to the redirect URI.
async function authorize(start) {
  const jar = new Map();
  let at = new URL(start);
  for (let hop = 0; hop < 12; hop++) {
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
    const res = await fetch(at, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const c of res.headers.getSetCookie()) {
      const pair = c.split(";")[0];
      const eq = pair.indexOf("=");
      jar.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    const location = res.headers.get("location");
    if (!location) throw new Error(`no redirect from ${at}: ${res.status} ${await res.text()}`);
    const next = new URL(location, at);
    if (next.href.startsWith(REDIRECT)) {
      const code = next.searchParams.get("code");
      if (!code) throw new Error(`no code: ${next}`);
      return code;
    }
    at = next;
  }
  throw new Error("too many redirects");
}

async function connect(authProvider) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
  const client = new Client({ name: "mcpgate-oauth-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

let session;
if (flow === "client_credentials") {
  session = await connect(
    new ClientCredentialsProvider({
      clientId: "cc-read",
      clientSecret: "cc-read-secret",
      scope: "kb.read",
      expectedIssuer: issuer,
    }),
  );
} else {
  const provider = new HeadlessProvider();
  const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    await new Client({ name: "mcpgate-oauth-test", version: "1.0.0" }).connect(first);
    throw new Error("connected without authorizing");
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  await first.finishAuth(await authorize(provider.authorizationUrl));
  session = await connect(provider);
}
const { client, transport } = session;
const tools = await client.listTools();
const result = await client.callTool({ name: "search_knowledge", arguments: { query: "oauth" } });
if (result.isError) throw new Error(`the call failed: ${JSON.stringify(result)}`);
console.log(JSON.stringify({ tools: tools.tools.map((t) => t.name), called: "search_knowledge" }));
await transport.terminateSession().catch(() => {});
await client.close();
