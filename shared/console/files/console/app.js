// The console's shell: sign-in, sign-out, and which page shows. Pages live
// in their own modules and are loaded when first shown.
import { session, get, api, enc, onUnauthorized } from './api.js';
import { ctx, errorBox } from './ui.js';
import { h, timeEl } from './dom.js';

const pages = {
  environments: () => import('./environments.js'),
  templates: () => import('./templates.js'),
  usage: () => import('./usage.js'),
  artifacts: () => import('./artifacts.js'),
  keys: () => import('./keys.js'),
  sandboxes: () => import('./sandboxes.js'),
  events: () => import('./events.js'),
  secrets: () => import('./secrets.js'),
};

const $ = (id) => document.getElementById(id);
let cleanup = null;
// Quick successive navigations load pages concurrently; only the latest
// may draw.
let routeSeq = 0;

// A sign-in handed over in the fragment: #code=<code> (envlease console) or
// #token=<token> (a link). Neither reaches a server (browsers do not send
// fragments), and it leaves the address bar and history before anything
// else runs. Neither signs the tab in by itself: whoever made the link may
// have put their own credential in it, to have this person work in their
// account (login CSRF), and a code proves no more than a token, since anyone
// can ask for one with their own token. So the page first says whose account
// it is and asks; only Sign in keeps the token.
function takeFragment() {
  const m = /^#(token|code)=([^&]*)/.exec(location.hash);
  if (!m) return null;
  history.replaceState(null, '', `${location.pathname}#/environments`);
  let value = '';
  try { value = decodeURIComponent(m[2]); } catch { /* malformed: refused below */ }
  return { kind: m[1], value };
}

// pending is the sign-in awaiting the person's answer: {token, who, minted},
// minted being the key record of a console token a code was exchanged for.
let pending = null;

async function handOver(f) {
  const seq = ++routeSeq;
  cancelPending();
  try {
    let token = f.value;
    let minted = null;
    if (f.kind === 'code') {
      const r = await api('POST', '/v1/console/sessions', { code: f.value }, '');
      token = r.token;
      minted = r.apiKey;
    }
    const who = await api('GET', '/v1/whoami', undefined, token);
    if (seq !== routeSeq) {
      if (minted) revoke(minted.id, token);
      return;
    }
    showConfirm({ token, who, minted });
  } catch (err) {
    // A later link or navigation has taken over: it says what happens.
    if (seq !== routeSeq) return;
    // Back to where the tab was (signed in or not), saying why.
    await route();
    $('notice').replaceChildren(errorBox(err));
  }
}

function showConfirm(p) {
  pending = p;
  if (cleanup) { cleanup(); cleanup = null; }
  $('page').replaceChildren();
  $('signin').hidden = true;
  $('notice').replaceChildren();
  const w = p.who;
  const as = w.user || `the organization key "${w.key.name}"`;
  $('confirm-title').textContent = `Sign in as ${as} of ${w.organization}?`;
  const rows = [['Organization', w.organization], ['User', w.user || 'none (an organization key, member rights)'],
    ['Role', w.role], ['Token', `${w.key.name} (${w.key.prefix}…)`]];
  if (w.key.expires) rows.push(['Expires', timeEl(w.key.expires)]);
  $('confirm-who').replaceChildren(...rows.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)]));
  const cur = ctx.whoami;
  $('confirm-current').hidden = !cur;
  $('confirm-current').textContent = cur
    ? `This tab is signed in as ${cur.user || cur.key.name} of ${cur.organization}: Sign in replaces that, Cancel keeps it.` : '';
  $('confirm').hidden = false;
  document.title = 'Confirm sign-in · envlease console';
  $('confirm-signin').focus();
}

// cancelPending drops a sign-in nobody confirmed; a console token minted
// for it is revoked, since nothing holds it any more.
function cancelPending() {
  $('confirm').hidden = true;
  const p = pending;
  pending = null;
  if (p && p.minted) revoke(p.minted.id, p.token);
}

function revoke(id, token) {
  api('DELETE', `/v1/keys/${enc(id)}`, undefined, token).catch(() => { /* it expires anyway */ });
}

function showSignIn(message) {
  if (cleanup) { cleanup(); cleanup = null; }
  cancelPending();
  ctx.whoami = null;
  $('nav').hidden = true;
  $('signout').hidden = true;
  $('who').textContent = '';
  $('page').replaceChildren();
  $('signin').hidden = false;
  $('notice').replaceChildren();
  if (message) $('notice').append(errorBox(message));
  document.title = 'Sign in · envlease console';
  $('token').focus();
}

async function signedIn() {
  try {
    ctx.whoami = await get('/v1/whoami');
  } catch (err) {
    if (err.status !== 401) showSignIn(err);
    return false;
  }
  showWho();
  return true;
}

function showWho() {
  $('signin').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = false;
  const w = ctx.whoami;
  $('who').textContent = `${w.user || w.key.name} (${w.role}) · ${w.organization}`;
}

async function route() {
  const seq = ++routeSeq;
  if (!session.token) { showSignIn(); return; }
  if (!ctx.whoami && !(await signedIn())) return;
  if (seq !== routeSeq) return;
  const [path, query] = (location.hash.replace(/^#\/?/, '') || 'environments').split('?');
  const [name, ...rest] = path.split('/');
  const load = pages[name] || pages.environments;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === `#/${name}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (cleanup) { cleanup(); cleanup = null; }
  $('notice').replaceChildren();
  const page = await load();
  // A 401 while the page loaded signed the tab out: the page draws nothing
  // over the sign-in.
  if (seq !== routeSeq || !session.token) return;
  const root = $('page');
  root.replaceChildren();
  document.title = `${page.title} · envlease console`;
  cleanup = page.render(root, { id: rest.join('/'), query: new URLSearchParams(query || '') }) || null;
}

onUnauthorized((err) => {
  session.forget();
  showSignIn(err);
});

$('signin-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  session.set($('token').value.trim());
  $('token').value = '';
  if (await signedIn()) {
    if (!location.hash.startsWith('#/')) history.replaceState(null, '', '#/environments');
    route();
  }
});

$('confirm-signin').addEventListener('click', () => {
  const p = pending;
  if (!p) return;
  pending = null;
  $('confirm').hidden = true;
  session.set(p.token, p.minted ? p.minted.id : '');
  ctx.whoami = p.who;
  showWho();
  history.replaceState(null, '', `${location.pathname}#/environments`);
  route();
  $('main').focus();
});

$('confirm-cancel').addEventListener('click', () => {
  cancelPending();
  route();
  $('main').focus();
});

$('signout').addEventListener('click', () => {
  // A console token this tab minted is of use to nobody else: revoke it.
  const minted = session.minted;
  const token = session.token;
  session.forget();
  if (minted) revoke(minted, token);
  history.replaceState(null, '', location.pathname);
  showSignIn();
});

window.addEventListener('hashchange', () => {
  const f = takeFragment();
  if (f) { handOver(f); return; }
  // Going elsewhere answers a pending sign-in with Cancel.
  cancelPending();
  route();
  $('main').focus();
});
// Escape folds an open panel (lease, upload) and leaves the focus on its
// summary, as a dialog's Escape would.
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape' || e.defaultPrevented) return;
  const open = e.target.closest && e.target.closest('details[open]');
  if (!open) return;
  open.open = false;
  open.querySelector('summary').focus();
});

const handed = takeFragment();
if (handed) handOver(handed);
else route();
