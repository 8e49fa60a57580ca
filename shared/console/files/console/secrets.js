// Secrets: the organization's secrets by name, who set each and when, and
// the templates that bind it; admins set and delete them. A value is typed
// into a password field, sent once, and never shown: the API returns none
// (docs/secrets.md).
import { h, field, timeEl, table } from './dom.js';
import { get, api, del, enc } from './api.js';
import { ctx, errorBox, guard } from './ui.js';

export const title = 'Secrets';

export function render(root) {
  const admin = ctx.whoami && ctx.whoami.role === 'admin';
  const list = h('div', {}, h('p', { text: 'Loading…' }));
  const out = h('div', { id: 'secret-result' });
  const refresh = () => guard(list, async () => {
    const { secrets } = await get('/v1/secrets');
    list.replaceChildren(secrets.length ? table(['Name', 'Set by', 'Set', 'Size', 'Bound by templates', admin ? 'Actions' : null].filter(Boolean),
      secrets.map((s) => h('tr', { 'data-secret-name': s.name },
        h('td', {}, h('code', { text: s.name })), h('td', { text: s.setBy }), h('td', {}, timeEl(s.set)),
        h('td', { text: `${s.size} bytes` }), h('td', { text: s.templates.join(', ') || '—' }),
        admin ? h('td', {}, h('button', {
          type: 'button', class: 'danger', text: 'Delete', 'aria-label': `Delete secret ${s.name}`,
          onclick: async () => {
            try { await del(`/v1/secrets/${enc(s.name)}`); out.replaceChildren(h('p', { class: 'panel', role: 'status', text: `Deleted ${s.name}.` })); refresh(); } catch (err) { out.replaceChildren(errorBox(err)); }
          },
        })) : null)))
      : h('p', { class: 'hint', text: 'No secrets yet.' }));
  });
  root.append(h('h1', { text: 'Secrets' }),
    h('p', { class: 'hint', text: 'Added by the nodes\u2019 network boundary to the requests templates bind them to; no environment, and no page, ever shows a value.' }));
  if (admin) {
    const name = h('input', { name: 'secret-name', required: true, maxlength: 64, pattern: '[A-Za-z_][A-Za-z0-9_]*', autocomplete: 'off' });
    const value = h('input', { name: 'secret-value', required: true, type: 'password', autocomplete: 'new-password', maxlength: 16384 });
    const form = h('form', {
      class: 'row', 'aria-label': 'Set a secret',
      onsubmit: async (e) => {
        e.preventDefault();
        try {
          const { secret } = await api('PUT', `/v1/secrets/${enc(name.value.trim())}`, { value: value.value });
          value.value = '';
          out.replaceChildren(h('p', { class: 'panel', role: 'status', text: `Set ${secret.name} (${secret.size} bytes).` }));
          name.value = '';
          refresh();
        } catch (err) { value.value = ''; out.replaceChildren(errorBox(err)); }
      },
    }, field('Name', name, 'letters, digits and _ (GITHUB_TOKEN)'), field('Value', value, 'sent once, never shown again'),
    h('button', { type: 'submit', text: 'Set' }));
    root.append(form);
  }
  root.append(out, list);
  refresh();
}
