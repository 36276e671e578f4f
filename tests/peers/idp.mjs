// A real OpenID provider for the OAuth tests: `oidc-provider` (certified), on 127.0.0.1,
// with client credentials, the authorization code flow with PKCE (login and consent are
// granted at once, so a client can follow the redirects headlessly), dynamic client
// registration, resource indicators (RFC 8707) and introspection (RFC 7662).
//
// Around it, for the tests only:
// - GET /jwks is served here from the same keys, counted, and can be made to fail
//   (POST /test/jwks {"down": true}), so a test can see how often mcpgate fetches it.
// - POST /test/sign signs claims of the test's choosing with the provider's own keys (or
//   a fresh key, published or not, or none at all), for the hostile-token cases; with
//   {"count": n}, n distinct tokens (for bench/oauth.py).
// - GET /test/counts says how many JWKS, introspection and token-exchange requests came.
// - Token exchange (RFC 8693) for mcpgate's client, as the grant-type extension point of
//   oidc-provider allows: the subject token is checked against the provider's keys and a
//   token for the asked `audience` signed, naming the subject's `sub` and `client_id` and
//   mcpgate as the actor. POST /test/exchange {"mode": …, "delay_ms": …} makes it answer
//   otherwise: `wrong_aud` (a token for another audience), `expired`, `refuse`
//   (invalid_grant), `fail` (a 500), `slow` (after delay_ms).
// - Entra ID's on-behalf-of, the same way: the JWT bearer grant (RFC 7523) with
//   `requested_token_use=on_behalf_of`, the API named by its scope (`api://kb/.default`
//   gives a token for `api://kb`).
//
// Usage: node idp.mjs [port]   Prints {"port": …, "issuer": …} once listening.

import http from 'node:http';
import crypto from 'node:crypto';
import Provider, { errors } from 'oidc-provider';
import * as jose from 'jose';

const port = Number(process.argv[2] ?? 0);

async function keyPair(alg, kid, crv) {
  const { privateKey, publicKey } = await jose.generateKeyPair(alg, { extractable: true, crv });
  const priv = { ...(await jose.exportJWK(privateKey)), kid, alg, use: 'sig' };
  const pub = { ...(await jose.exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { alg, kid, privateKey, publicKey, priv, pub };
}

const keys = {
  RS256: await keyPair('RS256', 'rsa-1'),
  ES256: await keyPair('ES256', 'ec-1'),
  EdDSA: await keyPair('EdDSA', 'ed-1', 'Ed25519'),
};
// What GET /jwks serves: the provider's keys and any published by /test/sign.
const published = Object.values(keys).map((k) => k.pub);
const counts = { jwks: 0, introspection: 0, token: 0, exchange: 0 };
const exchange = { mode: 'ok', delay_ms: 0 };
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
let jwksDown = false;

const server = http.createServer();
await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const clients = [
  {
    client_id: 'cc-write',
    client_secret: 'cc-write-secret',
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'kb.read kb.write',
  },
  {
    client_id: 'cc-read',
    client_secret: 'cc-read-secret',
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'kb.read',
  },
  {
    // Its tokens are opaque: only introspection can tell what they are.
    client_id: 'opaque-read',
    client_secret: 'opaque-read-secret',
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'kb.read',
  },
  {
    // mcpgate's own client, for introspection and token exchange.
    client_id: 'mcpgate',
    client_secret: 'mcpgate-secret',
    grant_types: ['client_credentials', TOKEN_EXCHANGE, JWT_BEARER],
    redirect_uris: [],
    response_types: [],
  },
];

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: Object.values(keys).map((k) => k.priv) },
  scopes: ['openid', 'offline_access', 'kb.read', 'kb.write'],
  cookies: { keys: ['test-cookie-key'] },
  pkce: { required: () => true },
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource, client) => ({
        scope: 'kb.read kb.write',
        audience: resource,
        accessTokenTTL: 300,
        accessTokenFormat: client.clientId.startsWith('opaque') ? 'opaque' : 'jwt',
        jwt: { sign: { alg: process.env.IDP_TOKEN_ALG ?? 'ES256' } },
      }),
    },
  },
});
provider.on('server_error', (_ctx, err) => console.error('idp server_error', err));

// The caller's token, checked against the provider's keys.
async function subjectOf(token) {
  try {
    return (await jose.jwtVerify(token, jose.createLocalJWKSet({ keys: published }), { issuer })).payload;
  } catch (e) {
    throw new errors.InvalidGrant(`the subject token does not verify (${e.code ?? e.message})`);
  }
}

// Answers an exchange of `subject`'s token for `audience`, as the test's mode says.
async function issueFor(ctx, subject, audience, scope) {
  if (exchange.mode === 'refuse') throw new errors.InvalidGrant(`${subject.sub} may not act at ${audience}`);
  if (exchange.mode === 'fail') {
    ctx.status = 500;
    ctx.body = { error: 'server_error', error_description: 'down for the test' };
    return;
  }
  if (exchange.mode === 'slow') await new Promise((r) => setTimeout(r, exchange.delay_ms));
  const now = Math.floor(Date.now() / 1000);
  const exp = exchange.mode === 'expired' ? now - 30 : now + 300;
  const token = await new jose.SignJWT({
    sub: subject.sub,
    client_id: subject.client_id,
    scope: scope ?? subject.scope,
    act: { sub: ctx.oidc.client.clientId },
    jti: crypto.randomUUID(),
  })
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: keys.ES256.kid })
    .setIssuer(issuer)
    .setAudience(exchange.mode === 'wrong_aud' ? 'https://elsewhere.example' : audience)
    .setIssuedAt(now)
    .setExpirationTime(exp)
    .sign(keys.ES256.privateKey);
  ctx.body = {
    access_token: token,
    issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
    token_type: 'Bearer',
    expires_in: exp - now,
  };
}

provider.registerGrantType(
  TOKEN_EXCHANGE,
  async (ctx) => {
    counts.exchange += 1;
    const { subject_token: subjectToken, subject_token_type: subjectType, audience, scope } = ctx.oidc.params;
    if (subjectType !== 'urn:ietf:params:oauth:token-type:access_token') {
      throw new errors.InvalidRequest('subject_token_type must be an access token');
    }
    await issueFor(ctx, await subjectOf(subjectToken), audience, scope);
  },
  ['subject_token', 'subject_token_type', 'audience', 'scope', 'requested_token_type'],
);

provider.registerGrantType(
  JWT_BEARER,
  async (ctx) => {
    counts.exchange += 1;
    const { assertion, requested_token_use: use, scope } = ctx.oidc.params;
    if (use !== 'on_behalf_of') throw new errors.InvalidRequest('requested_token_use must be on_behalf_of');
    const api = (scope ?? '').split(' ')[0];
    if (!/^api:\/\/[^/]+\/\.default$/.test(api)) throw new errors.InvalidScope('scope names no API (api://…/.default)');
    await issueFor(ctx, await subjectOf(assertion), api.replace(/\/\.default$/, ''), scope);
  },
  ['assertion', 'requested_token_use', 'scope'],
);

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : {};
}

const b64 = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

// Signs `claims` as the test asks: {alg, claims, kid?, fresh?, publish?}.
async function sign(body) {
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    iss: issuer,
    sub: 'tester',
    client_id: 'forger',
    scope: 'kb.read kb.write',
    iat: now,
    exp: now + 300,
    ...(body.claims ?? {}),
  };
  for (const [k, v] of Object.entries(claims)) if (v === null) delete claims[k];
  const alg = body.alg ?? 'ES256';
  if (alg === 'none') {
    return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`;
  }
  if (alg === 'HS256-with-public-key') {
    // The old confusion attack: HMAC keyed with the RSA public key anyone can fetch.
    const secret = await jose.exportSPKI(keys.RS256.publicKey);
    const input = `${b64({ alg: 'HS256', typ: 'JWT', kid: keys.RS256.kid })}.${b64(claims)}`;
    const mac = crypto.createHmac('sha256', secret).update(input).digest('base64url');
    return `${input}.${mac}`;
  }
  let key = keys[alg];
  if (body.fresh) {
    key = await keyPair(alg, `fresh-${crypto.randomUUID()}`, alg === 'EdDSA' ? 'Ed25519' : undefined);
    if (body.publish) published.push(key.pub);
  }
  return new jose.SignJWT(claims)
    .setProtectedHeader({ alg, typ: 'at+jwt', kid: body.kid ?? key.kid })
    .sign(key.privateKey);
}

// Login as "alice" and consent to whatever was asked, at once.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  if (prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId: 'alice' } }, { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [resource, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(resource, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
server.on('request', async (req, res) => {
  try {
    const path = req.url.split('?')[0];
    if (path === '/jwks') {
      counts.jwks += 1;
      if (jwksDown) return json(res, 500, { error: 'down for the test' });
      return json(res, 200, { keys: published });
    }
    if (path === '/test/sign') {
      // {count: n}: n tokens, each with its own jti (the benchmark's first-seen tokens).
      const spec = await readJson(req);
      if (!spec.count) return json(res, 200, { token: await sign(spec) });
      const tokens = [];
      for (let i = 0; i < spec.count; i++) {
        tokens.push(await sign({ ...spec, claims: { ...(spec.claims ?? {}), jti: crypto.randomUUID() } }));
      }
      return json(res, 200, { tokens });
    }
    if (path === '/test/counts') return json(res, 200, counts);
    if (path === '/test/exchange') {
      Object.assign(exchange, { mode: 'ok', delay_ms: 0 }, await readJson(req));
      return json(res, 200, exchange);
    }
    if (path === '/test/jwks') {
      jwksDown = Boolean((await readJson(req)).down);
      return json(res, 200, { down: jwksDown });
    }
    if (path.startsWith('/interaction/')) return await interaction(req, res);
    if (path === '/token/introspection') counts.introspection += 1;
    if (path === '/token') counts.token += 1;
    return callback(req, res);
  } catch (e) {
    console.error('idp error', e);
    if (!res.headersSent) json(res, 500, { error: String(e) });
  }
});

console.log(JSON.stringify({ port: server.address().port, issuer }));
