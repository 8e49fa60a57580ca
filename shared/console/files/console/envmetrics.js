// An environment's metrics on its page: CPU, memory and processes as
// sparklines (SVG). Once it ended, the coarse history its node kept of its
// whole life (GET /v1/environments/{id}/metrics). While it runs the samples
// are live on its node only, which the console does not connect to (its
// Content-Security-Policy allows the API and the artifact store alone), so
// the page says how to watch them instead.
import { h, svg } from './dom.js';
import { get, enc } from './api.js';
import { errorBox } from './ui.js';

const W = 320;
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
      show(
        h('p', { class: 'muted', text: `Its whole life, ${m.history.length} points from ${from.toISOString()} to ${to.toISOString()} (each an average; memory and processes at their peak).` }),
        h('dl', { class: 'fields metrics' }, series.map(([key, name, pick, fmt, floor]) => {
          const values = m.history.map(pick);
          return [h('dt', { text: name }), h('dd', {}, sparkline(key, values, floor), h('span', { class: 'muted', text: ` peak ${fmt(Math.max(...values))}, last ${fmt(values[values.length - 1])}` }))];
        })));
    } catch (err) {
      shownFor = '';
      show(errorBox(err));
    }
  };

  // update draws the panel for the environment as last read; an ended
  // one's history is read once.
  const update = (e) => {
    if (['pending', 'starting', 'ready', 'stopping'].includes(e.state)) {
      shownFor = '';
      show(h('p', { class: 'muted', id: 'env-metrics-live' },
        'Its node samples CPU, memory, disk, network and processes every 5 s; watch them with ',
        h('code', { text: `envlease top ${e.id}` }), '. The history its node keeps is drawn here once it ends.'));
      return;
    }
    if (shownFor === e.id) return;
    shownFor = e.id;
    readHistory(e.id);
  };
  return { panel, update };
}
