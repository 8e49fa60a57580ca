// An environment's metrics on its page: CPU, memory and processes as
// sparklines (SVG). While it runs, its node's samples of the last 10
// minutes, read again every 5 s through the API (GET
// /v1/environments/{id}/metrics/recent: the API relays them from the node,
// since the console's Content-Security-Policy lets the page reach the API
// alone); once it ended, the coarse history its node kept of its whole life
// (GET /v1/environments/{id}/metrics).
import { h, svg } from './dom.js';
import { get, enc } from './api.js';
import { errorBox } from './ui.js';

const W = 320;
const LIVE_MS = 5000;
const H = 48;

const mib = (n) => `${(n / 1048576).toFixed(1)} MiB`;

// sparkline draws values scaled to their peak, or to floor when the peak
// is lower (CPU to at least one CPU, so an idle one draws flat).
const sparkline = (name, values, floor) => {
  const peak = Math.max(...values, floor);
  const step = values.length > 1 ? W / (values.length - 1) : 0;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(H - 2 - (peak > 0 ? (v / peak) * (H - 4) : 0)).toFixed(1)}`).join(' ');
  return svg('svg', { class: 'sparkline', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': name },
    svg('polyline', { 'data-series': name, points, fill: 'none', stroke: '#1d3557', 'stroke-width': 1.5 }));
};

const series = [
  ['cpu', 'CPU', (x) => x.cpu, (v) => `${v.toFixed(1)} %`, 100],
  ['memory', 'Memory', (x) => x.memory, mib, 0],
  ['processes', 'Processes', (x) => x.processes, (v) => `${v}`, 0],
];

export function metricsPanel() {
  const panel = h('section', { id: 'env-metrics', 'aria-labelledby': 'env-metrics-title' });
  let shownFor = '';
  const show = (...children) => panel.replaceChildren(h('h2', { id: 'env-metrics-title', text: 'Metrics' }), ...children);

  const readHistory = async (id) => {
    show(h('p', { class: 'muted', role: 'status', text: 'Reading its metrics…' }));
    try {
      const m = await get(`/v1/environments/${enc(id)}/metrics`);
      if (!m.history.length) {
        show(h('p', { class: 'muted', id: 'env-metrics-none', text: 'Its node kept no history of its use (it was lost, or ended before its first sample).' }));
        return;
      }
      const from = new Date(m.history[0].time);
      const to = new Date(m.history[m.history.length - 1].time);
      draw(m.history, `Its whole life, ${m.history.length} points from ${from.toISOString()} to ${to.toISOString()} (each an average; memory and processes at their peak).`, 'env-metrics-history');
    } catch (err) {
      shownFor = '';
      show(errorBox(err));
    }
  };

  // draw shows samples as sparklines under a line that says what they are.
  const draw = (samples, what, id) => {
    show(
      h('p', { class: 'muted', id, text: what }),
      h('dl', { class: 'fields metrics' }, series.map(([key, name, pick, fmt, floor]) => {
        const values = samples.map(pick);
        return [h('dt', { text: name }), h('dd', {}, sparkline(key, values, floor), h('span', { class: 'muted', text: ` peak ${fmt(Math.max(...values))}, last ${fmt(values[values.length - 1])}` }))];
      })));
  };

  // Live: the node's recent samples every LIVE_MS while the panel is on the
  // page and the page is visible (each read is one call of the API and one
  // of the node; nothing is written).
  let timer = 0;
  let liveFor = '';
  const stopLive = () => { clearTimeout(timer); timer = 0; liveFor = ''; };
  const readLive = async (id) => {
    timer = 0;
    if (liveFor !== id) return;
    if (!panel.isConnected) { stopLive(); return; }
    if (!document.hidden) {
      try {
        const m = await get(`/v1/environments/${enc(id)}/metrics/recent?since=10m`);
        if (liveFor !== id) return;
        if (!m.samples.length) {
          show(h('p', { class: 'muted', id: 'env-metrics-live', role: 'status' },
            'Its node samples CPU, memory, disk, network and processes every 5 s; the first sample is drawn here as soon as it is taken (or watch them with ',
            h('code', { text: `envlease top ${id}` }), ').'));
        } else {
          const last = m.samples[m.samples.length - 1];
          draw(m.samples, `Live from node ${m.node}: ${m.samples.length} samples of the last 10 minutes, one every 5 s, the last at ${new Date(last.time).toISOString()}; refreshed every 5 s.`, 'env-metrics-live');
        }
      } catch (err) {
        if (liveFor !== id) return;
        show(errorBox(err));
      }
    }
    if (liveFor === id) timer = setTimeout(() => readLive(id), LIVE_MS);
  };

  // update draws the panel for the environment as last read: a running one
  // live, an ended one's history read once.
  const update = (e) => {
    if (['starting', 'ready', 'stopping'].includes(e.state) && e.node) {
      shownFor = '';
      if (liveFor === e.id) return;
      stopLive();
      liveFor = e.id;
      show(h('p', { class: 'muted', role: 'status', text: 'Reading its metrics from its node…' }));
      readLive(e.id);
      return;
    }
    stopLive();
    if (['pending', 'starting', 'ready', 'stopping', 'paused'].includes(e.state)) {
      shownFor = '';
      show(h('p', { class: 'muted', id: 'env-metrics-none' },
        e.state === 'paused' ? 'Paused: it runs on no node, so it has no samples; they are drawn here again once it wakes.'
          : 'Its metrics are drawn here once a node runs it.'));
      return;
    }
    if (shownFor === e.id) return;
    shownFor = e.id;
    readHistory(e.id);
  };
  return { panel, update };
}
