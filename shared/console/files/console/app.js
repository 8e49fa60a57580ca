// The console's shell: sign-in, sign-out, and which page shows. Pages live
// in their own modules and are loaded when first shown.
import { session, get, onUnauthorized } from './api.js';
import { ctx, errorBox } from './ui.js';

const pages = {
  environments: () => import('./environments.js'),
  templates: () => import('./templates.js'),
  usage: () => import('./usage.js'),
  artifacts: () => import('./artifacts.js'),
  keys: () => import('./keys.js'),
  sandboxes: () => import('./sandboxes.js'),
};

const $ = (id) => document.getElementById(id);
let cleanup = null;
// Quick successive navigations load pages concurrently; only the latest
// may draw.
let routeSeq = 0;

// A token handed over in the fragment (envlease console) never reaches a
// server: fragments are not sent, and it is removed from the address bar
// and history before anything else runs.
function takeFragmentToken() {
  const m = /^#token=([^&]+)/.exec(location.hash);
  if (!m) return;
  session.set(decodeURIComponent(m[1]));
  history.replaceState(null, '', `${location.pathname}#/environments`);
}

function showSignIn(message) {
  if (cleanup) { cleanup(); cleanup = null; }
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
  $('signin').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = false;
  const w = ctx.whoami;
  $('who').textContent = `${w.user || w.key.name} (${w.role}) · ${w.organization}`;
  return true;
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
  if (seq !== routeSeq) return;
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

$('signout').addEventListener('click', () => {
  session.forget();
  history.replaceState(null, '', location.pathname);
  showSignIn();
});

window.addEventListener('hashchange', () => {
  const fresh = location.hash.startsWith('#token=');
  if (fresh) { takeFragmentToken(); ctx.whoami = null; }
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

takeFragmentToken();
route();
