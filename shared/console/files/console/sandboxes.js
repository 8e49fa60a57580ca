// Sandboxes: the registered machines and whether each join key was used.
import { h, timeEl, table } from './dom.js';
import { get } from './api.js';
import { guard } from './ui.js';

export const title = 'Sandboxes';

export function render(root) {
  const body = h('div', {}, h('p', { text: 'Loading…' }));
  root.append(h('h1', { text: 'Sandboxes' }),
    h('p', { class: 'hint', text: 'Machines registered with envlease sandbox register; a join key works once.' }), body);
  guard(body, async () => {
    const { sandboxes } = await get('/v1/sandboxes');
    if (!sandboxes.length) { body.replaceChildren(h('p', { text: 'No sandboxes are registered.' })); return; }
    body.replaceChildren(table(['Name', 'Hostname', 'Created by', 'Created', 'Join key', 'Joined'],
      sandboxes.map((s) => h('tr', {},
        h('td', { text: s.name }), h('td', { text: s.hostname || '—' }), h('td', { text: s.createdBy }),
        h('td', {}, timeEl(s.created)), h('td', {}, h('code', { text: `${s.joinKeyPrefix}…` })),
        h('td', {}, s.joined ? ['redeemed ', timeEl(s.joined)] : 'not redeemed yet')))));
  });
}
