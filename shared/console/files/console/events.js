// Events: what happened in the organization, newest first, with filters by
// kind or type and by subject, paging with "Older", and a live mode that
// asks for new events every few seconds. A stop shows its reason.
import { h, field, timeEl, table } from './dom.js';
import { get, enc } from './api.js';
import { guard } from './ui.js';

export const title = 'Events';

const TYPES = ['environment.', 'environment.leased', 'environment.starting', 'environment.ready', 'environment.stopping',
  'environment.stopped', 'environment.failed', 'artifact.', 'key.', 'sandbox.', 'quota.refused', 'node.', 'webhook.disabled'];

// details is the part of an event's data one looks for first.
function details(ev) {
  const d = ev.data || {};
  const keys = {
    environment: ['template', 'name', 'reason', 'error', 'node'],
    quota: ['template', 'limit', 'running'],
    webhook: ['url', 'reason'],
  }[ev.type.split('.')[0]] || Object.keys(d).filter((k) => typeof d[k] !== 'object').sort();
  return keys.filter((k) => d[k] !== undefined && d[k] !== '').map((k) =>
    h('span', { class: 'label', 'data-field': k, text: `${k}=${d[k]}` }));
}

function subjectLink(s) {
  if (s.kind === 'environment') return h('a', { href: `#/environments/${enc(s.id)}`, text: `${s.kind}/${s.id}` });
  return h('code', { text: `${s.kind}/${s.id}` });
}

export function render(root, params) {
  const type = h('select', { name: 'type' }, h('option', { value: '', text: 'All' }), TYPES.map((t) => h('option', { value: t, text: t })));
  const subject = h('input', { name: 'subject', placeholder: 'environment/env_…', maxlength: 160 });
  const live = h('input', { type: 'checkbox', name: 'live' });
  type.value = params.query.get('type') || '';
  subject.value = params.query.get('subject') || '';
  const list = h('div', { id: 'events' }, h('p', { text: 'Loading…' }));
  const more = h('button', { type: 'button', text: 'Older', hidden: true });
  let shown = [];
  let next = '';
  let timer = null;

  const query = (cursor) => {
    const q = new URLSearchParams({ limit: '50' });
    if (type.value) q.set('type', type.value);
    if (subject.value.trim()) q.set('subject', subject.value.trim());
    if (cursor) q.set('cursor', cursor);
    return `/v1/events?${q}`;
  };
  const draw = () => {
    list.replaceChildren(shown.length ? table(['Time', 'Type', 'Subject', 'Actor', 'Details'],
      shown.map((ev) => h('tr', { 'data-event': ev.id, 'data-type': ev.type },
        h('td', {}, timeEl(ev.time)), h('td', { class: 'nowrap' }, h('code', { text: ev.type })), h('td', { class: 'wide' }, subjectLink(ev.subject)),
        h('td', { class: 'wide' }, h('span', { text: ev.actor.kind }), ' ', h('code', { text: ev.actor.id })), h('td', {}, h('span', { class: 'labels' }, details(ev))))))
      : h('p', { class: 'muted', text: 'No events.' }));
    more.hidden = !next;
  };
  const load = () => guard(list, async () => {
    const r = await get(query(''));
    shown = r.events; next = r.next;
    draw();
  });
  const older = () => guard(list, async () => {
    const r = await get(query(next));
    shown = shown.concat(r.events); next = r.next;
    draw();
  });
  // Live: the first page again, merged with what is shown. An event may
  // commit after a newer one was shown (its time is when it was stamped),
  // so the merge is kept in id order (ids sort by time), newest first.
  const poll = () => guard(list, async () => {
    const r = await get(query(''));
    const seen = new Set(shown.map((e) => e.id));
    const fresh = r.events.filter((e) => !seen.has(e.id));
    if (fresh.length) {
      shown = fresh.concat(shown).sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
      draw();
    }
  });
  const setLive = () => {
    if (timer) { clearInterval(timer); timer = null; }
    if (live.checked) timer = setInterval(poll, 3000);
  };
  live.addEventListener('change', setLive);
  more.addEventListener('click', older);
  const form = h('form', { class: 'row', 'aria-label': 'Filter events', onsubmit: (e) => { e.preventDefault(); load(); } },
    field('Type', type), field('Subject', subject, 'KIND/ID'), field('Live', live, 'new events every 3 s'),
    h('button', { type: 'submit', text: 'Show' }));
  root.append(h('h1', { text: 'Events' }),
    h('p', { class: 'hint', text: 'What happened in your organization in the last 30 days, newest first.' }), form, list, more);
  load();
  return () => { if (timer) clearInterval(timer); };
}
