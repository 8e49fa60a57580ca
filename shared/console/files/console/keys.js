// Keys and tokens: create (shown once) with scopes and an expiry, list
// with last use, revoke; trusted CI issuers for admins (issuers.js).
import { h, field, timeEl, table, secretBox } from './dom.js';
import { get, post, del, enc } from './api.js';
import { ctx, errorBox, guard } from './ui.js';
import { renderIssuers } from './issuers.js';

// SCOPES is the documented set; none ticked is every right of the holder.
export const SCOPES = ['environments:lease', 'environments:exec', 'environments:network', 'environments:read', 'artifacts:read', 'artifacts:write',
  'usage:read', 'events:read', 'tokens:read', 'tokens:write', 'secrets:read', 'secrets:write', 'admin'];

// ADMIN_SCOPES only an admin's token can carry.
const ADMIN_SCOPES = ['admin', 'secrets:write'];

// scopeBoxes is a fieldset of one checkbox per scope; admin ones only for admins.
// prefix keeps the ids of two such fieldsets on one page apart.
export function scopeBoxes(legend, admin, prefix) {
  const boxes = SCOPES.filter((sc) => admin || !ADMIN_SCOPES.includes(sc)).map((sc) => {
    const id = `${prefix}${sc.replace(':', '-')}`;
    return h('span', { class: 'check' }, h('input', { type: 'checkbox', id, name: 'scope', value: sc }), h('label', { for: id, text: sc }));
  });
  return h('fieldset', { class: 'scopes' }, h('legend', { text: legend }), boxes);
}

export function checkedScopes(form) {
  return [...form.querySelectorAll('input[name=scope]:checked')].map((c) => c.value);
}

export const title = 'Keys and tokens';

export function render(root) {
  const admin = ctx.whoami && ctx.whoami.role === 'admin';
  const list = h('div', {}, h('p', { text: 'Loading…' }));
  const out = h('div', { id: 'key-result' });
  const name = h('input', { name: 'name', required: true, maxlength: 100 });
  const kind = h('select', { name: 'kind' },
    h('option', { value: 'token', text: 'My CLI token' }),
    admin ? h('option', { value: 'key', text: 'Organization API key' }) : null);
  const expires = h('select', { name: 'expires' },
    h('option', { value: '', text: 'never (until revoked)' }),
    h('option', { value: '1h', text: '1 hour' }),
    h('option', { value: '24h', text: '1 day' }),
    h('option', { value: '168h', text: '7 days' }),
    h('option', { value: '720h', text: '30 days' }),
    h('option', { value: '2160h', text: '90 days' }));
  const scopes = scopeBoxes('Scopes (none: every right you have)', admin, 'key-scope-');
  const refresh = () => guard(list, async () => {
    const { keys } = await get('/v1/keys');
    keys.sort((a, b) => (a.created < b.created ? 1 : -1));
    // Seven columns, so that twenty keys with long names fit a laptop's
    // width: the prefix goes under the name, the source under the owner.
    list.replaceChildren(table(['Name', 'Owner', 'Scopes', 'Created', 'Last used', 'Status', 'Actions'],
      keys.map((k) => h('tr', { 'data-key': k.id },
        h('td', {}, h('span', { text: k.name }), h('div', { class: 'hint' }, h('code', { text: `${k.prefix}…` }))),
        h('td', {}, h('span', { text: `${k.owner.kind} ${k.owner.id}` }), h('div', { class: 'hint', text: `source: ${k.source}` })),
        h('td', { class: 'scopes' }, k.scopes ? [h('span', { class: 'labels' }, k.scopes.map((sc) => h('span', { class: 'label', text: sc }))), k.restrictions ? ' (restricted)' : ''] : 'all'),
        h('td', {}, timeEl(k.created)), h('td', {}, k.lastUsed ? timeEl(k.lastUsed) : 'never'),
        h('td', {}, status(k)),
        h('td', {}, k.revoked ? null : k.id === ctx.whoami.key.id ? h('span', { class: 'hint', text: 'signed in with it' }) : h('button', {
          type: 'button', class: 'danger', text: 'Revoke', 'aria-label': `Revoke ${k.name}`,
          onclick: async () => {
            try { await del(`/v1/keys/${enc(k.id)}`); out.replaceChildren(h('p', { class: 'panel', role: 'status', text: `Revoked ${k.name}.` })); refresh(); } catch (err) { out.replaceChildren(errorBox(err)); }
          },
        }))))));
  });
  const form = h('form', {
    class: 'row', 'aria-label': 'Create a key',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        const grant = {};
        const picked = checkedScopes(e.target);
        if (picked.length) grant.scopes = picked;
        if (expires.value) grant.expiresIn = expires.value;
        const r = kind.value === 'key'
          ? await post('/v1/keys', { name: name.value.trim(), ...grant })
          : await post('/v1/tokens', { name: name.value.trim(), source: 'console', ...grant });
        out.replaceChildren(secretBox(`New ${kind.value === 'key' ? 'organization key' : 'token'} "${r.apiKey.name}"`, r.token));
        name.value = '';
        refresh();
      } catch (err) { out.replaceChildren(errorBox(err)); }
    },
  }, field('Kind', kind), field('Name', name), field('Expires', expires), scopes, h('button', { type: 'submit', text: 'Create' }));
  root.append(h('h1', { text: 'Keys and tokens' }),
    h('p', { class: 'hint', text: admin ? 'As an admin you see every key of the organization.' : 'You see your own CLI tokens.' }),
    form, out, list);
  refresh();
  if (admin) renderIssuers(root);
}

// status says whether a key still works: revoked, expired, or active.
function status(k) {
  if (k.revoked) return ['revoked ', timeEl(k.revoked)];
  if (k.expires && new Date(k.expires) <= new Date()) return ['expired ', timeEl(k.expires)];
  if (k.expires) return ['active until ', timeEl(k.expires)];
  return 'active';
}
