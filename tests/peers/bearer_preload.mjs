// Preloaded (node --import) into the conformance suite when it runs against a route with
// `auth = "bearer"`: the suite has no option for request headers, so every request it
// makes, through fetch or undici alike, gets `Authorization: Bearer $MCPGATE_TEST_BEARER`
// from undici's global dispatcher, which Node's fetch shares.
import { Agent, setGlobalDispatcher } from 'undici';

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
