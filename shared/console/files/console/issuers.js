// Trusted CI issuers (admins): CI jobs an OIDC issuer vouches for exchange
// their identity token for a short-lived token; no key is stored in the CI.
import { h, field, timeEl, table, parseLabels } from './dom.js';
import { get, post, del, enc } from './api.js';
import { errorBox, guard } from './ui.js';
import { scopeBoxes, checkedScopes } from './keys.js';

export function renderIssuers(root) {
  const list = h('div', {}, h('p', { text: 'Loading…' }));
  const out = h('div', { id: 'issuer-result' });
  const name = h('input', { name: 'issuer-name', required: true, maxlength: 100 });
  const url = h('input', { name: 'issuer-url', required: true, type: 'url', value: 'https://token.actions.githubusercontent.com' });
  const audience = h('input', { name: 'issuer-audience', required: true, value: 'envlease' });
  const conditions = h('textarea', { name: 'issuer-conditions', required: true, rows: 2, placeholder: 'repository=acme/app, ref=refs/heads/main' });
  const lifetime = h('select', { name: 'issuer-lifetime' },
    h('option', { value: '15m', text: '15 minutes' }), h('option', { value: '30m', text: '30 minutes' }), h('option', { value: '1h', text: '1 hour' }));
  const refresh = () => guard(list, async () => {
    const { issuers } = await get('/v1/issuers');
    list.replaceChildren(issuers.length ? table(['Name', 'Issuer', 'Audience', 'Conditions', 'Scopes', 'Token lifetime', 'Created', 'Actions'],
      issuers.map((i) => h('tr', { 'data-issuer': i.id },
        h('td', { text: i.name }), h('td', { text: i.url }), h('td', { text: i.audience }),
        h('td', { text: Object.entries(i.conditions).map(([k, v]) => `${k}=${v}`).join(', ') }),
        h('td', { text: i.scopes.join(', ') }), h('td', { text: i.tokenLifetime }), h('td', {}, timeEl(i.created)),
        h('td', {}, h('button', {
          type: 'button', class: 'danger', text: 'Remove', 'aria-label': `Remove issuer ${i.name}`,
          onclick: async () => {
            try { await del(`/v1/issuers/${enc(i.id)}`); out.replaceChildren(h('p', { class: 'panel', role: 'status', text: `Removed ${i.name}.` })); refresh(); } catch (err) { out.replaceChildren(errorBox(err)); }
          },
        })))))
      : h('p', { class: 'hint', text: 'No trusted issuers yet.' }));
  });
  const form = h('form', {
    class: 'row', 'aria-label': 'Trust a CI issuer',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        const { issuer } = await post('/v1/issuers', {
          name: name.value.trim(), url: url.value.trim(), audience: audience.value.trim(),
          conditions: parseLabels(conditions.value), scopes: checkedScopes(e.target), tokenLifetime: lifetime.value,
        });
        out.replaceChildren(h('p', { class: 'panel', role: 'status', text: `Trusting ${issuer.name}.` }));
        name.value = '';
        refresh();
      } catch (err) { out.replaceChildren(errorBox(err)); }
    },
  }, field('Name', name), field('Issuer URL', url), field('Audience', audience),
  field('Conditions', conditions, 'claim=value, one or more; patterns such as refs/heads/* allowed'),
  field('Token lifetime', lifetime), scopeBoxes('Scopes of exchanged tokens', false, 'issuer-scope-'), h('button', { type: 'submit', text: 'Trust' }));
  root.append(h('h2', { text: 'Trusted CI issuers' }),
    h('p', { class: 'hint', text: 'CI jobs these OIDC issuers vouch for get short-lived tokens without a stored key.' }),
    form, out, list);
  refresh();
}
