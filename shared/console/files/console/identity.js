// An environment's identity on its page (docs/identity.md): the issuer and,
// per audience, the token's file inside the environment and the claims a
// token carries. Never a token: the API gives the console none.
import { h, table } from './dom.js';
import { get, enc } from './api.js';
import { errorBox } from './ui.js';

const SHOWN = ['sub', 'iss', 'org', 'template', 'project', 'labels', 'environment', 'pool', 'leasedBy', 'leasedByKind'];

function claimText(v) {
  if (v && typeof v === 'object') {
    const parts = Object.keys(v).sort().map((k) => `${k}=${v[k]}`);
    return parts.length ? parts.join(', ') : '—';
  }
  return v === '' ? '""' : String(v);
}

export function identityPanel(id) {
  const panel = h('section', { id: 'env-identity', 'aria-labelledby': 'env-identity-title' });
  let view = null;
  let asked = false;

  const load = async () => {
    try {
      view = await get(`/v1/environments/${enc(id)}/identity`);
      draw();
    } catch (err) {
      panel.replaceChildren(h('h2', { id: 'env-identity-title', text: 'Identity' }), errorBox(err));
    }
  };

  const draw = () => {
    const parts = [h('h2', { id: 'env-identity-title', text: 'Identity' })];
    if (!view) {
      parts.push(h('p', { class: 'muted', text: 'Loading…' }));
      panel.replaceChildren(...parts);
      return;
    }
    parts.push(h('p', { class: 'hint', text: `Its tokens are signed by ${view.issuer}, live ${view.lifetime} each and are replaced at 80% of that. Whatever runs inside can read them; a cloud trusts them only as its trust policy says.` }));
    for (const t of view.tokens) {
      parts.push(h('h3', { text: `Audience ${t.audience}` }));
      parts.push(h('p', {}, 'File inside the environment: ', h('code', { class: 'identity-path', text: t.path })));
      parts.push(table(['Claim', 'Value'], SHOWN.filter((k) => k in t.claims).map((k) => h('tr', { 'data-claim': k },
        h('td', { text: k }), h('td', {}, h('code', { text: claimText(t.claims[k]) }))))));
    }
    panel.replaceChildren(...parts);
  };

  return {
    panel,
    // update is called with the environment on each refresh; the claims
    // are read once (they follow from the lease, which does not change).
    update(e) {
      if (!e.identity) {
        panel.replaceChildren();
        return false;
      }
      if (!asked) {
        asked = true;
        draw();
        load();
      }
      return true;
    },
  };
}
