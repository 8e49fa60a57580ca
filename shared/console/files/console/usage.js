// Usage: environment time per template (or project, person, label) per day,
// with cost when the organization set rates, and its budgets with what is
// left; the chart is a stacked bar chart that
// reads without colour (each template has its own pattern and the legend and
// table name them), with totals and a CSV download.
import { h, svg, field, hours, table } from './dom.js';
import { get, enc } from './api.js';
import { guard } from './ui.js';

export const title = 'Usage';

const PATTERNS = [
  (id) => svg('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse' }, svg('rect', { width: 6, height: 6, fill: '#1d3557' })),
  (id) => svg('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    svg('rect', { width: 6, height: 6, fill: '#fff' }), svg('rect', { width: 3, height: 6, fill: '#2a6f4e' })),
  (id) => svg('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse' },
    svg('rect', { width: 6, height: 6, fill: '#fff' }), svg('circle', { cx: 3, cy: 3, r: 1.8, fill: '#8a3b12' })),
  (id) => svg('pattern', { id, width: 8, height: 8, patternUnits: 'userSpaceOnUse' },
    svg('rect', { width: 8, height: 8, fill: '#fff' }), svg('path', { d: 'M0 0L8 8M8 0L0 8', stroke: '#5b2a86', 'stroke-width': 1.5 })),
  (id) => svg('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse' },
    svg('rect', { width: 6, height: 6, fill: '#fff' }), svg('rect', { width: 6, height: 2.5, fill: '#7a4b00' })),
];

function isoDay(d) { return d.toISOString().slice(0, 10); }

export function render(root) {
  const since = h('input', { type: 'date', name: 'since' });
  const start = new Date(Date.now() - 13 * 86400000);
  since.value = isoDay(start);
  // Groupings other than template are offered once the settings say the
  // organization records them.
  const by = h('select', { name: 'by' }, h('option', { value: 'template', text: 'template' }));
  const filter = h('input', { type: 'text', name: 'filter', placeholder: 'project=web', autocomplete: 'off' });
  const body = h('div', { id: 'usage' });
  const budgets = h('div', { id: 'budgets' });
  const form = h('form', { class: 'row', 'aria-label': 'Usage range', onsubmit: (e) => { e.preventDefault(); load(); } },
    field('From (UTC day)', since, 'to today; at most 400 days back'),
    field('Group by', by, 'template, or a grouping the organization records'),
    field('Filter', filter, 'DIM=VALUE, optional'),
    h('button', { type: 'submit', text: 'Show' }));
  const load = () => guard(body, async () => {
    let q = `/v1/usage?since=${enc(since.value)}`;
    if (by.value !== 'template') q += `&by=${enc(by.value)}`;
    if (filter.value.trim()) q += `&filter=${enc(filter.value.trim())}`;
    const r = await get(q);
    draw(body, r, since.value);
  });
  root.append(h('h1', { text: 'Usage' }), form, body, budgets);
  guard(budgets, async () => {
    const { settings } = await get('/v1/usage/settings');
    for (const g of settings.groupings || []) by.append(h('option', { value: g, text: g }));
    drawBudgets(budgets, await get('/v1/budgets'));
  });
  load();
}

// drawBudgets lists the budgets with what their period has left.
function drawBudgets(el, list) {
  if (!list.budgets.length) { el.replaceChildren(); return; }
  const amount = (v, unit) => (unit === 'seconds' ? `${hours(v)} h` : `${v.toFixed(2)} ${unit}`);
  el.replaceChildren(h('h2', { text: 'Budgets' }),
    table(['Budget', 'Scope', 'Period', ['Limit', 'num'], ['Spent', 'num'], ['Left', 'num'], 'State'],
      list.budgets.map((b) => h('tr', {},
        h('td', { text: b.id }), h('td', { text: b.scope }), h('td', { text: `${b.period} from ${b.periodStart}` }),
        h('td', { class: 'num', text: amount(b.seconds || b.cost, b.unit) }),
        h('td', { class: 'num', text: amount(b.spent, b.unit) }),
        h('td', { class: 'num', text: amount(b.remaining, b.unit) }),
        h('td', { text: b.exhausted ? (b.hard ? 'spent: leases refused, environments stopped' : 'spent: leases refused') : 'ok' })))));
}

// groupOf is an entry's group: its value when grouped, else its template.
function groupOf(u) {
  if (u.value === undefined) return u.template;
  return u.value === '' ? '(none)' : u.value;
}

function draw(body, report, from) {
  const days = [];
  for (let d = new Date(`${from}T00:00:00Z`); isoDay(d) <= isoDay(new Date()); d = new Date(d.getTime() + 86400000)) days.push(isoDay(d));
  const templates = [...new Set(report.usage.map(groupOf))].sort();
  const grouping = report.by || 'template';
  const by = {};
  for (const u of report.usage) by[`${u.day}|${groupOf(u)}`] = u.seconds;
  const dayTotal = days.map((d) => templates.reduce((s, t) => s + (by[`${d}|${t}`] || 0), 0));
  // The axis unit follows the data, so a quiet range still shows its bars.
  const peak = Math.max(1, ...dayTotal);
  const [unit, per] = peak >= 3600 ? ['hours', 3600] : peak >= 60 ? ['minutes', 60] : ['seconds', 1];
  const max = niceCeil(peak / per) * per;
  // The drawing is as wide as the page has room for (up to 800), so its
  // 11 px labels stay 11 px on a phone instead of shrinking with the chart.
  const W = Math.max(320, Math.min(800, Math.round(body.clientWidth || 800)));
  const H = 300, L = 56, B = 40, T = 26;
  const bw = (W - L - 10) / Math.max(days.length, 1);
  const y = (s) => H - B - (s / max) * (H - B - T);
  const defs = svg('defs', {}, templates.map((t, i) => PATTERNS[i % PATTERNS.length](`pat-${i}`)));
  const bars = [];
  days.forEach((d, di) => {
    let acc = 0;
    templates.forEach((t, ti) => {
      const s = by[`${d}|${t}`] || 0;
      if (!s) return;
      bars.push(svg('rect', { x: L + di * bw + 1, y: y(acc + s), width: Math.max(bw - 2, 1), height: y(acc) - y(acc + s), fill: `url(#pat-${ti})`, stroke: '#1b1f24', 'stroke-width': 0.5 },
        svg('title', { text: `${d} ${t}: ${hours(s)} hours` })));
      acc += s;
    });
  });
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => svg('g', {},
    svg('line', { x1: L, x2: W - 10, y1: y(max * f), y2: y(max * f), stroke: '#c9d1d9' }),
    svg('text', { x: L - 4, y: y(max * f) + 4, 'text-anchor': 'end', text: fmt(max * f / per) })));
  const every = Math.ceil(days.length / Math.max(2, Math.floor((W - L) / 60)));
  const xlabels = days.map((d, i) => (i % every ? null : svg('text', { x: L + i * bw + bw / 2, y: H - B + 14, 'text-anchor': 'middle', text: d.slice(5) })));
  const chart = svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': 'usage-title' },
    svg('title', { id: 'usage-title', text: `Environment ${unit} per day by ${grouping} from ${from}; the table below has the figures` }), defs, ticks, bars, xlabels,
    svg('text', { x: 4, y: 14, text: unit }));
  const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' }, templates.map((t, i) => h('li', {},
    svg('svg', { width: 18, height: 18, 'aria-hidden': 'true' }, svg('defs', {}, PATTERNS[i % PATTERNS.length](`leg-${i}`)), svg('rect', { width: 18, height: 18, fill: `url(#leg-${i})` })),
    ` ${t}`)));
  const costed = !!report.currency;
  const sumOf = (rows, f) => rows.reduce((s, u) => s + (f(u) || 0), 0);
  const totals = templates.map((t) => {
    const rows = report.usage.filter((u) => groupOf(u) === t);
    return [t, sumOf(rows, (u) => u.seconds), sumOf(rows, (u) => u.cost)];
  });
  const all = totals.reduce((s, [, v]) => s + v, 0);
  const allCost = totals.reduce((s, [, , c]) => s + c, 0);
  const money = (c) => `${c.toFixed(2)} ${report.currency}`;
  const csv = [`day,${csvCell(grouping)},seconds${costed ? ',cost' : ''}`,
    ...report.usage.map((u) => `${u.day},${csvCell(u.value === undefined ? u.template : u.value)},${u.seconds}${costed ? `,${u.cost ?? ''}` : ''}`)].join('\n');
  const head = [grouping === 'template' ? 'Template' : grouping, ['Hours', 'num'], ['Seconds', 'num'], ...(costed ? [['Cost', 'num']] : [])];
  const href = URL.createObjectURL(new Blob([csv], { type: 'text/csv' }));
  body.replaceChildren(
    templates.length ? chart : h('p', { text: 'No environment time in this range.' }),
    legend,
    h('h2', { text: 'Totals' }),
    table(head, [
      ...totals.map(([t, s, c]) => h('tr', {}, h('td', { text: t }), h('td', { class: 'num', text: hours(s) }), h('td', { class: 'num', text: s }),
        costed ? h('td', { class: 'num', text: money(c) }) : null)),
      h('tr', {}, h('th', { scope: 'row', text: 'All' }), h('td', { class: 'num', text: hours(all) }), h('td', { class: 'num', text: all }),
        costed ? h('td', { class: 'num', text: money(allCost) }) : null)]),
    h('p', {}, h('a', { class: 'button', href, download: `envlease-usage-${from}.csv`, text: 'Download CSV' })));
}

function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((n) => n >= v);
}

function fmt(v) {
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function csvCell(s) {
  return /[",\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}
