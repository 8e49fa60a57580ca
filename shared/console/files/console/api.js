// The console's only way to the service: the public API, with the person's
// token, from the browser. Nothing here is privileged.

const KEY = 'envlease.token';
// MINTED is the key id of a console token this tab got by exchanging a
// sign-in code: nobody else holds it, so signing out revokes it.
const MINTED = 'envlease.minted';

export const session = {
  // sessionStorage only: the token lives as long as the tab and is never
  // sent anywhere but in the Authorization header of API calls.
  get token() { return sessionStorage.getItem(KEY) || ''; },
  get minted() { return sessionStorage.getItem(MINTED) || ''; },
  set(token, mintedKeyId = '') {
    sessionStorage.setItem(KEY, token);
    if (mintedKeyId) sessionStorage.setItem(MINTED, mintedKeyId);
    else sessionStorage.removeItem(MINTED);
  },
  forget() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(MINTED); },
};

export class ApiError extends Error {
  constructor(status, body, requestId) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || '';
    this.field = (body && body.field) || '';
    this.requestId = requestId || '';
  }
}

const listeners = new Set();
// onUnauthorized registers what happens when the token stops working.
export function onUnauthorized(f) { listeners.add(f); }

// api calls the API with the tab's token, or with the token given (a token
// not signed in yet: one being confirmed; '' sends none).
export async function api(method, path, body, token = session.token) {
  const init = { method, headers: {}, cache: 'no-store' };
  if (token) init.headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, { error: `the API could not be reached: ${e.message}` }, '');
  }
  const rid = res.headers.get('X-Request-Id') || '';
  let data = null;
  if (res.status !== 204) {
    const text = await res.text();
    try { data = text ? JSON.parse(text) : null; } catch { data = { error: text.slice(0, 200) }; }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data, rid);
    // Only the tab's own token failing signs the tab out: a bad token or
    // code from a link must not end the session it arrived in.
    if (res.status === 401 && token && token === session.token) listeners.forEach((f) => f(err));
    throw err;
  }
  return data;
}

export const get = (p) => api('GET', p);
export const post = (p, b) => api('POST', p, b === undefined ? {} : b);
export const del = (p) => api('DELETE', p);

// all follows `next` cursors to the end of a list.
export async function all(path, key) {
  const out = [];
  let cursor = '';
  for (let i = 0; i < 50; i++) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await get(cursor ? `${path}${sep}cursor=${encodeURIComponent(cursor)}` : path);
    out.push(...(page[key] || []));
    if (!page.next) break;
    cursor = page.next;
  }
  return out;
}

export const enc = encodeURIComponent;
