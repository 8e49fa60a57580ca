// One environment: every field, exports, shares, its identity, its error, its metrics, its log, touch and delete.
import { h, labels, timeEl, left, table } from './dom.js';
import { get, post, del, enc } from './api.js';
import { errorBox, guard } from './ui.js';
import { logPanel } from './envlog.js';
import { netLogPanel } from './netlog.js';
import { previewsPanel } from './previews.js';
import { identityPanel } from './identity.js';
import { metricsPanel } from './envmetrics.js';

const REFRESH_MS = 2000;

export function renderDetail(root, id) {
  const body = h('div', { id: 'env-detail' });
  const out = h('div', { role: 'status' });
  let env = null;
  const log = logPanel();
  const netlog = netLogPanel();
  const previews = previewsPanel(id);
  const identity = identityPanel(id);
  const metrics = metricsPanel();

  const draw = () => {
    const e = env;
    const now = Date.now();
    const isLive = ['pending', 'starting', 'ready'].includes(e.state);
    const rows = [
      ['ID', e.id], ['Name', e.name], ['State', h('span', { class: `state state-${e.state}`, 'data-state': e.state, text: e.state })],
      ['Template', e.template], ['Pool', e.pool], ['Node', e.node || '—'], ['Sandbox', e.sandbox || '—'],
      ['Project', e.project || '—'], ['Labels', labels(e.labels)], ['Created by', e.createdBy],
      ['Created', timeEl(e.created)], ['Ready', timeEl(e.ready)],
      ['Ready after', e.readyMs == null ? '—' : `${(e.readyMs / 1000).toFixed(1)} s`],
      ['Idle timeout', `${e.idle}${isLive ? ` (idle in ${left(e.idleUntil, now)})` : ''}`],
      ['Hard timeout', `${e.hard}${isLive ? ` (expires in ${left(e.expires, now)})` : ''}`],
      ['Idle until', timeEl(e.idleUntil)], ['Expires', timeEl(e.expires)], ['Stopped', timeEl(e.stopped)],
      ['Stop reason', e.stopReason || '—'], ['Snapshot', e.snapshot || '—'],
      ['Restored', e.restored ? `${e.restored.key} (${e.restored.files} files at ${e.restored.root})` : '—'],
    ];
    const parts = [h('h1', {}, `Environment ${e.name || e.id}`)];
    if (e.error) parts.push(h('div', { class: 'panel error', role: 'alert' }, h('strong', { text: 'Failed: ' }), h('span', { class: 'env-error', text: e.error })));
    if (isLive) {
      parts.push(h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', id: 'touch', text: 'Touch (reset idle timer)', onclick: touch }),
        h('button', { type: 'button', class: 'danger', id: 'delete', text: 'Delete', onclick: remove })));
    }
    parts.push(h('dl', { class: 'fields' }, rows.map(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)])));
    parts.push(h('h2', { text: 'Exports' }), e.exports.length
      ? table(['Service', 'Listen', 'Target'], e.exports.map((x) => h('tr', {}, h('td', { text: x.service }), h('td', { text: x.listen || '—' }), h('td', { text: x.target || '—' }))))
      : h('p', { class: 'muted', text: 'None.' }));
    previews.update(e);
    parts.push(previews.panel);
    parts.push(h('h2', { text: 'Shares' }), e.shares.length
      ? table(['Name', 'Direction', 'In the environment', 'Local path', 'Files', 'Artifact'], e.shares.map((s) => h('tr', {},
        h('td', { text: s.name }), h('td', { text: s.direction }), h('td', { text: s.envPath }), h('td', { text: s.localPath }),
        h('td', { text: s.files.length }), h('td', { text: s.artifact || '—' }))))
      : h('p', { class: 'muted', text: 'None.' }));
    if (identity.update(e)) parts.push(identity.panel);
    metrics.update(e);
    parts.push(metrics.panel);
    log.update(e);
    parts.push(log.panel);
    netlog.update(e);
    parts.push(netlog.panel);
    body.replaceChildren(...parts);
  };

  const refresh = async () => {
    const got = await guard(body, () => get(`/v1/environments/${enc(id)}`));
    if (got) { env = got; draw(); }
  };
  const touch = async () => {
    try {
      env = await post(`/v1/environments/${enc(id)}/touch`);
      draw();
      out.replaceChildren(h('p', { class: 'panel', text: 'Touched: the idle timer starts again.' }));
    } catch (err) { out.replaceChildren(errorBox(err)); }
  };
  // The confirmation takes the focus; Cancel or Escape gives it back to
  // the Delete button, so a keyboard user is where they were.
  const remove = () => {
    const cancel = () => {
      out.replaceChildren();
      document.getElementById('delete')?.focus();
    };
    const yes = h('button', { type: 'button', class: 'danger', id: 'confirm-delete', text: 'Yes, delete it', onclick: reallyRemove });
    const question = h('p', { id: 'confirm-delete-text', text: `Delete ${env.name || env.id}? Its processes stop and its lease ends.` });
    out.replaceChildren(h('div', {
      class: 'panel', role: 'alertdialog', 'aria-label': 'Confirm delete', 'aria-describedby': 'confirm-delete-text',
      onkeydown: (e) => { if (e.key === 'Escape') { e.preventDefault(); cancel(); } },
    },
    question,
    h('div', { class: 'actions' }, yes, h('button', { type: 'button', class: 'secondary', id: 'cancel-delete', text: 'Cancel', onclick: cancel }))));
    yes.focus();
  };
  const reallyRemove = async () => {
    try {
      await del(`/v1/environments/${enc(id)}`);
      out.replaceChildren(h('p', { class: 'panel', text: 'Deleted.' }));
      await refresh();
    } catch (err) { out.replaceChildren(errorBox(err)); }
  };

  root.append(h('p', {}, h('a', { href: '#/environments', text: '← All environments' })), out, body);
  refresh();
  const poll = setInterval(() => { if (document.visibilityState === 'visible') refresh(); }, REFRESH_MS);
  return () => clearInterval(poll);
}
