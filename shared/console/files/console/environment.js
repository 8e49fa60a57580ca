// One environment: every field, exports, shares, its identity, its error, its metrics, its log, touch and delete;
// a paused one says why and until when it is kept, and wakes.
import { h, labels, timeEl, when, left, table, bytes } from './dom.js';
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
  // waking is set by Wake and cleared once the environment is ready (or
  // ended): until then each refresh says where the wake is.
  let waking = false;
  const log = logPanel();
  const netlog = netLogPanel();
  const previews = previewsPanel(id);
  const identity = identityPanel(id);
  const metrics = metricsPanel();

  const draw = () => {
    const e = env;
    const now = Date.now();
    const isLive = ['pending', 'starting', 'ready'].includes(e.state);
    const isPaused = e.state === 'paused';
    const rows = [
      ['ID', e.id], ['Name', e.name], ['State', h('span', { class: `state state-${e.state}`, 'data-state': e.state, text: e.state })],
      ['Template', e.template], ['Pool', e.pool], ['Node', e.node || '—'], ['Sandbox', e.sandbox || '—'],
      ['Project', e.project || '—'], ['Labels', labels(e.labels)], ['Created by', e.createdBy],
      ['Created', timeEl(e.created)], ['Ready', timeEl(e.ready)],
      ['Ready after', e.readyMs == null ? '—' : `${(e.readyMs / 1000).toFixed(1)} s`],
      ['Idle timeout', `${e.idle}${isLive ? ` (idle in ${left(e.idleUntil, now)})` : ''}`],
      ['Hard timeout', `${e.hard}${isLive || isPaused ? ` (expires in ${left(e.expires, now)})` : ''}`],
      ['Idle until', timeEl(e.idleUntil)], ['Expires', timeEl(e.expires)], ['Stopped', timeEl(e.stopped)],
      ['Stop reason', e.stopReason || '—'],
      ...(e.onIdle === 'pause' ? [['When idle', `pause, kept up to ${e.retention} while paused`]] : []),
      ...(e.pausedAt ? [['Paused', timeEl(e.pausedAt)]] : []),
      ...(isPaused ? [['Kept until', timeEl(e.retainUntil)]] : []),
      ...(e.resumed ? [['Woke', timeEl(e.resumed)]] : []),
      ['Snapshot', e.snapshot || '—'],
      ...(e.checkpoint ? [['Checkpoint', checkpointText(e.checkpoint)]] : []),
      ['Restored', e.restored ? `${e.restored.key} (${e.restored.files} files at ${e.restored.root})` : '—'],
    ];
    const parts = [h('h1', {}, `Environment ${e.name || e.id}`)];
    if (e.error) parts.push(h('div', { class: 'panel error', role: 'alert' }, h('strong', { text: 'Failed: ' }), h('span', { class: 'env-error', text: e.error })));
    if (isPaused) {
      parts.push(h('div', { class: 'panel paused', id: 'paused', role: 'region', 'aria-label': 'Paused' },
        h('p', {}, h('strong', { text: 'Paused' }), ` ${pausedWhy(e)}: its files are kept as a checkpoint`,
          e.snapshot ? [' (', h('code', { text: e.snapshot }), ')'] : '',
          ` until ${when(e.retainUntil)}, when it is deleted unless woken. It holds no node and no running slot.`),
        h('p', { class: 'hint', text: 'Wake starts it again from the checkpoint (its files, not its memory); a touch, exec or tunnel wakes it too.' }),
        h('div', { class: 'actions' },
          h('button', { type: 'button', id: 'wake', text: 'Wake', onclick: wake }),
          h('button', { type: 'button', class: 'danger', id: 'delete', text: 'Delete', onclick: remove }))));
    }
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
    // The page is drawn anew every refresh: the control that had the focus
    // (Wake after a refusal, say) keeps it, so a keyboard user stays put.
    const had = body.contains(document.activeElement) ? document.activeElement : null;
    body.replaceChildren(...parts);
    if (had && !had.isConnected && had.id) document.getElementById(had.id)?.focus();
    else if (had && had.isConnected && document.activeElement !== had) had.focus();
  };

  const refresh = async () => {
    const got = await guard(body, () => get(`/v1/environments/${enc(id)}`));
    if (got) { env = got; draw(); followWake(); }
  };
  // followWake says where a wake is as the page refreshes: pending (waiting
  // for a node), starting (restoring its checkpoint), ready.
  const followWake = () => {
    if (!waking) return;
    const say = {
      pending: 'Waking: pending, waiting for a node of its pool.',
      starting: 'Waking: starting, its checkpoint is being restored.',
      ready: 'Awake: ready again, restored from its checkpoint.',
    }[env.state];
    if (!say) {
      waking = false;
      if (env.state !== 'paused') out.replaceChildren(h('p', { class: 'panel', id: 'wake-status', text: `The wake ended ${env.state}.` }));
      return;
    }
    if (env.state === 'ready') waking = false;
    out.replaceChildren(h('p', { class: 'panel', id: 'wake-status', tabindex: -1, 'data-state': env.state, text: say }));
  };
  // The Wake button is not disabled while it asks: a disabled button
  // loses the focus, and a refused wake leaves the focus on it to try again.
  let asking = false;
  const wake = async () => {
    if (asking) return;
    asking = true;
    try {
      env = await post(`/v1/environments/${enc(id)}/wake`);
      waking = true;
      draw();
      followWake();
      // The Wake button is gone with the redraw: the focus goes to what
      // the wake says, so a keyboard user is not left at the top.
      document.getElementById('wake-status')?.focus();
    } catch (err) {
      if (err.status !== 401) out.replaceChildren(errorBox(err, { template: env.template }));
    } finally {
      asking = false;
    }
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

// pausedWhy says since when and why (the stop reason, idle for a pause).
function pausedWhy(e) {
  const why = e.stopReason === 'idle' ? 'because it was idle' : (e.stopReason ? `(${e.stopReason})` : '');
  return [e.pausedAt ? `since ${when(e.pausedAt)}` : '', why].filter(Boolean).join(' ');
}

function checkpointText(c) {
  const parts = [c.state];
  if (c.files || c.bytes) parts.push(`${c.files} file${c.files === 1 ? '' : 's'}, ${bytes(c.bytes)}`);
  if (c.pause) parts.push('taken to pause');
  if (c.artifact) parts.push(`artifact ${c.artifact}`);
  if (c.error) parts.push(c.error);
  return parts.join('; ');
}
