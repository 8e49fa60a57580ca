// Building DOM from data: every value goes in as text (textContent or an
// attribute), never as markup, so what the API returns cannot become HTML.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

let seq = 0;
// field is a labelled control; the label is tied to it by id.
export function field(label, control, hint) {
  const id = control.id || `f${++seq}`;
  control.id = id;
  const parts = [h('label', { for: id, text: label }), control];
  if (hint) {
    const hid = `${id}-hint`;
    control.setAttribute('aria-describedby', hid);
    parts.push(h('span', { class: 'hint', id: hid, text: hint }));
  }
  return h('div', { class: 'field' }, parts);
}

export function labels(obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return h('span', { class: 'muted', text: 'none' });
  return h('span', { class: 'labels' }, entries.map(([k, v]) => h('span', { class: 'label', text: `${k}=${v}` })));
}

// parseLabels reads "key=value" pairs, one per line or comma separated.
export function parseLabels(text) {
  const out = {};
  for (const raw of text.split(/[\n,]/)) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf('=');
    if (i <= 0) throw new Error(`label "${line}" is not key=value`);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

export function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
}

export function timeEl(ts) {
  return h('time', { datetime: ts || '', text: when(ts) });
}

// left says how long until ts, to the second, for countdowns.
export function left(ts, now = Date.now()) {
  if (!ts) return '—';
  let s = Math.round((new Date(ts).getTime() - now) / 1000);
  if (s <= 0) return 'now';
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${String(m).padStart(2, '0')}m`;
  return `${m}m ${String(s).padStart(2, '0')}s`;
}

export function bytes(n) {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// hours is a number of seconds in hours, always with two decimals (0.00,
// 0.01, 1.50, 12.25): one format down a column, to the 36 s a hundredth
// is; the seconds are shown beside it where that is too coarse.
export function hours(seconds) {
  return (seconds / 3600).toFixed(2);
}

// secretBox shows a token or key once: the only copy the page keeps is this
// element, and it is gone with the next page.
export function secretBox(title, secret, note) {
  const code = h('code', { text: secret, 'data-secret': '' });
  const status = h('span', { role: 'status', class: 'hint' });
  return h('div', { class: 'panel secret', role: 'region', 'aria-label': title },
    h('strong', { text: title }),
    code,
    h('div', { class: 'actions' },
      copyButton(secret, status, 'Copy'),
      status),
    h('p', { class: 'hint', text: note || 'It is shown only now: copy it before leaving this page.' }));
}

export function copyButton(text, status, label = 'Copy') {
  return h('button', {
    type: 'button', class: 'secondary', text: label,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        status.textContent = 'Copied.';
      } catch {
        status.textContent = 'Could not copy; select the text and copy it.';
      }
    },
  });
}

// table is a data table. Each cell carries its column's name (data-label),
// which a phone-width layout shows beside the value when rows become cards.
// The roles are the elements' own, spelled out because some browsers drop a
// table's semantics once CSS changes its display, as the cards do.
export function table(headers, rows, caption) {
  const names = headers.map((t) => (Array.isArray(t) ? t[0] : t));
  for (const row of rows) {
    row.setAttribute('role', 'row');
    [...row.children].forEach((cell, i) => {
      if (!cell.hasAttribute('role')) cell.setAttribute('role', cell.tagName === 'TH' ? 'rowheader' : 'cell');
      if (names[i] && !cell.hasAttribute('data-label')) cell.setAttribute('data-label', names[i]);
    });
  }
  return h('div', { class: 'table-wrap' },
    h('table', { class: 'rows', role: 'table' },
      caption ? h('caption', { class: 'muted', text: caption }) : null,
      h('thead', { role: 'rowgroup' }, h('tr', { role: 'row' }, headers.map((t) => {
        const [text, cls] = Array.isArray(t) ? t : [t];
        return h('th', { scope: 'col', role: 'columnheader', class: cls, text });
      }))),
      h('tbody', { role: 'rowgroup' }, rows)));
}
