// Preloaded (node --import) into the conformance suite when it runs against a route with
// `auth = "bearer"`: the suite has no option for request headers, so every request it
// makes, through fetch or undici alike, gets `Authorization: Bearer $MCPGATE_TEST_BEARER`
// from undici's global dispatcher, which Node's fetch shares; and those it makes with
// `node:http`'s `request` (the 2026-07-28 suite's header scenarios) get it from a wrapper.
import { Agent, setGlobalDispatcher } from 'undici';
import http from 'node:http';
import { syncBuiltinESMExports } from 'node:module';

const token = process.env.MCPGATE_TEST_BEARER;
if (!token) throw new Error('bearer_preload.mjs: MCPGATE_TEST_BEARER is not set');

const withBearer = (dispatch) => (opts, handler) => {
  const headers = { ...flatten(opts.headers), authorization: `Bearer ${token}` };
  return dispatch({ ...opts, headers }, handler);
};

// Dispatch options carry headers as an object, an array of pairs, or a flat array.
function flatten(headers) {
  if (!headers) return {};
  if (Array.isArray(headers)) {
    const out = {};
    const flat = Array.isArray(headers[0]) ? headers.flat() : headers;
    for (let i = 0; i + 1 < flat.length; i += 2) out[String(flat[i]).toLowerCase()] = flat[i + 1];
    return out;
  }
  if (typeof headers[Symbol.iterator] === 'function') return Object.fromEntries(headers);
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}

setGlobalDispatcher(new Agent().compose(withBearer));

const request = http.request;
http.request = (options, ...rest) => {
  if (options && typeof options === 'object' && !(options instanceof URL)) {
    options = { ...options, headers: { ...flatten(options.headers), authorization: `Bearer ${token}` } };
  }
  return request(options, ...rest);
};
syncBuiltinESMExports();
