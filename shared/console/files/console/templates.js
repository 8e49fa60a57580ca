// Templates and quotas: what the organization can lease, and how full each
// template's quota is now.
import { h } from './dom.js';
import { get, enc } from './api.js';
import { guard } from './ui.js';

export const title = 'Templates and quotas';

export function render(root) {
  const body = h('div', {}, h('p', { text: 'Loading…' }));
  root.append(h('h1', { text: 'Templates and quotas' }), body);
  guard(body, async () => {
    const [t, q] = await Promise.all([get('/v1/templates'), get('/v1/quotas')]);
    const quota = Object.fromEntries(q.quotas.map((x) => [x.template, x]));
    body.replaceChildren(
      h('p', { class: 'hint', text: `Pools of the organization: ${t.pools.join(', ') || 'none'}` }),
      h('div', { class: 'cards' }, t.templates.map((tpl) => card(tpl, quota[tpl.name]))));
  });
}

function card(t, q) {
  const running = q ? q.running : 0;
  const max = q ? q.maxLeases : t.quota.maxLeases;
  const mid = `meter-${t.name}`;
  return h('article', { class: 'card', 'data-template': t.name },
    h('h2', { text: t.name }),
    t.description ? h('p', { text: t.description }) : null,
    h('label', { for: mid, text: `Running ${running} of ${max}` }),
    h('meter', { id: mid, min: 0, max: Math.max(max, 1), value: running, low: Math.max(max - 1, 0) || 0.5, high: max, optimum: 0 }),
    h('dl', { class: 'fields' },
      h('dt', { text: 'Pools' }), h('dd', { text: t.pools.join(', ') }),
      h('dt', { text: 'Idle timeout' }), h('dd', { text: t.timeouts.idle }),
      h('dt', { text: 'Hard timeout' }), h('dd', { text: t.timeouts.hard }),
      h('dt', { text: 'Runtime' }), h('dd', { text: t.runtime }),
      h('dt', { text: 'Resources' }), h('dd', { text: resources(t.resources) }),
      h('dt', { text: 'Exports' }), h('dd', { text: Object.keys(t.exports || {}).join(', ') || 'none' })),
    h('p', {}, h('a', { href: `#/environments?template=${enc(t.name)}`, text: `Live environments of ${t.name}` })));
}

// resources says which limits a template sets; one it leaves out (0 or
// empty) is not a limit of 0, it is no limit at all.
export function resources(r) {
  const parts = [];
  if (r && r.cpus) parts.push(`${r.cpus} ${r.cpus === 1 ? 'CPU' : 'CPUs'}`);
  if (r && r.memory) parts.push(`${r.memory} memory`);
  if (r && r.pids) parts.push(`${r.pids} processes`);
  return parts.length ? parts.join(', ') : 'no limits';
}
