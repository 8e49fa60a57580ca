// Environments: the live list with countdowns, filters, leasing, and the
// detail view of one environment.
import { h, field, labels, parseLabels, timeEl, when, left, table } from './dom.js';
import { all, get, post, enc } from './api.js';
import { errorBox, guard } from './ui.js';
import { renderDetail } from './environment.js';

export const title = 'Environments';

const STATES = ['live', 'pending', 'starting', 'ready', 'stopping', 'stopped', 'failed', 'paused'];
const REFRESH_MS = 5000;

export function render(root, { id, query }) {
  if (id) return renderDetail(root, id);
  const state = h('select', { name: 'state' }, STATES.map((s) => h('option', { value: s, text: s === 'live' ? 'live and paused' : s })));
  state.value = STATES.includes(query.get('state')) ? query.get('state') : 'live';
  const labelFilter = h('input', { type: 'search', name: 'label', placeholder: 'team=web', value: query.get('label') || '' });
  const templateFilter = h('input', { type: 'search', name: 'template', placeholder: 'any', value: query.get('template') || '' });
  const status = h('p', { class: 'hint', role: 'status' });
  const list = h('div', { id: 'env-list' });
  const leaseOut = h('div');
  let envs = [];

  const draw = () => {
    const want = labelFilter.value.trim();
    const tpl = templateFilter.value.trim();
    const shown = envs.filter((e) => {
      if (tpl && e.template !== tpl) return false;
      if (!want) return true;
      const [k, v] = want.split('=');
      return v === undefined ? k in (e.labels || {}) : (e.labels || {})[k] === v;
    });
    const now = Date.now();
    if (!shown.length) {
      list.replaceChildren(h('p', { text: envs.length ? 'No environment matches the filters.' : `No ${state.value} environments.` }));
      return;
    }
    list.replaceChildren(table(
      ['Name', 'State', 'Template', 'Labels', 'Created', 'Idle in', 'Expires in'],
      shown.map((e) => h('tr', { 'data-id': e.id },
        h('td', {}, h('a', { href: `#/environments/${enc(e.id)}`, text: e.name || e.id })),
        h('td', {}, h('span', { class: `state state-${e.state}`, text: e.state })),
        h('td', { text: e.template }),
        h('td', {}, labels(e.labels)),
        h('td', {}, timeEl(e.created)),
        idleCell(e, now),
        h('td', { class: 'num', text: live(e) || e.state === 'paused' ? left(e.expires, now) : '—' }))),
      `${shown.length} environment(s), refreshed every ${REFRESH_MS / 1000} s while this tab is visible`));
  };

  // The live list shows the paused environments beside the live ones, as
  // `envlease ls` does: they are one use away from running.
  const fetchEnvs = async () => {
    const ask = (s) => all(`/v1/environments?state=${enc(s)}&limit=200`, 'environments');
    if (state.value !== 'live') return ask(state.value);
    const [lv, paused] = await Promise.all([ask('live'), ask('paused')]);
    return [...lv, ...paused].sort((a, b) => (a.created < b.created ? 1 : a.created > b.created ? -1 : 0));
  };
  const refresh = async () => {
    const got = await guard(list, fetchEnvs);
    if (got) { envs = got; draw(); status.textContent = `Updated ${new Date().toLocaleTimeString()}`; }
  };

  const filters = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter environments', onsubmit: (e) => e.preventDefault() },
    field('State', state), field('Label', labelFilter, 'key or key=value'), field('Template', templateFilter));
  state.addEventListener('change', refresh);
  labelFilter.addEventListener('input', draw);
  templateFilter.addEventListener('input', draw);

  root.append(h('h1', { text: 'Environments' }), leaseForm(leaseOut, refresh), leaseOut, filters, status, list);
  refresh();
  const poll = setInterval(() => { if (document.visibilityState === 'visible') refresh(); }, REFRESH_MS);
  const tick = setInterval(() => { if (document.visibilityState === 'visible' && envs.length) draw(); }, 1000);
  const onVisible = () => { if (document.visibilityState === 'visible') refresh(); };
  document.addEventListener('visibilitychange', onVisible);
  return () => { clearInterval(poll); clearInterval(tick); document.removeEventListener('visibilitychange', onVisible); };
}

// idleCell is the "Idle in" cell: the countdown of a live environment, and
// until when a paused one is kept (short, to fit the column; the full time
// is its title).
function idleCell(e, now) {
  if (e.state === 'paused' && e.retainUntil) {
    const short = new Date(e.retainUntil).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: 'numeric', minute: '2-digit' });
    return h('td', { class: 'num' }, 'kept until ', h('time', { datetime: e.retainUntil, title: when(e.retainUntil), text: short }));
  }
  return h('td', { class: 'num', text: live(e) ? left(e.idleUntil, now) : '—' });
}

export function live(e) {
  return e.state === 'pending' || e.state === 'starting' || e.state === 'ready';
}

function leaseForm(out, done) {
  const template = h('select', { name: 'template', required: true });
  const name = h('input', { name: 'name', maxlength: 100 });
  const lbls = h('textarea', { name: 'labels', rows: 2, placeholder: 'team=web' });
  const idle = h('input', { name: 'idle', placeholder: 'template default', pattern: '[0-9hms.]+' });
  const hard = h('input', { name: 'hard', placeholder: 'template default', pattern: '[0-9hms.]+' });
  const submit = h('button', { type: 'submit', text: 'Lease' });
  get('/v1/templates').then((r) => {
    template.replaceChildren(...r.templates.map((t) => h('option', { value: t.name, text: `${t.name} (idle ${t.timeouts.idle}, hard ${t.timeouts.hard})` })));
  }).catch((err) => out.replaceChildren(errorBox(err)));
  const form = h('form', {
    class: 'stack', 'aria-label': 'Lease an environment',
    onsubmit: async (e) => {
      e.preventDefault();
      const body = { template: template.value };
      try {
        body.labels = parseLabels(lbls.value);
      } catch (err) {
        out.replaceChildren(errorBox(err));
        return;
      }
      if (name.value.trim()) body.name = name.value.trim();
      if (idle.value.trim()) body.idle = idle.value.trim();
      if (hard.value.trim()) body.hard = hard.value.trim();
      submit.disabled = true;
      try {
        const r = await post('/v1/environments', body);
        out.replaceChildren(h('p', { class: 'panel', role: 'status' }, 'Leased ',
          h('a', { href: `#/environments/${enc(r.environment.id)}`, text: r.environment.name || r.environment.id }),
          ` (${r.environment.state}).`));
        name.value = '';
        lbls.value = '';
        done();
      } catch (err) {
        if (err.status !== 401) out.replaceChildren(errorBox(err, { template: body.template }));
      } finally {
        submit.disabled = false;
      }
    },
  },
  field('Template', template), field('Name', name, 'defaults to the template name'),
  field('Labels', lbls, 'key=value, one per line or comma separated'),
  field('Idle timeout', idle, 'e.g. 15m; at most the template\'s'), field('Hard timeout', hard, 'e.g. 2h; at most the template\'s'),
  h('div', {}, submit));
  return h('details', { class: 'panel' }, h('summary', { text: 'Lease an environment' }), form);
}
