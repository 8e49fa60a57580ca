// An environment's network log on its page: every connection it opened or
// tried and every DNS question, with the rule that decided it; refusals
// stand out. Once it ended, the log its node kept (an artifact) is read
// through its signed link. While it runs the log is live on its node only,
// which the console does not connect to (its Content-Security-Policy
// allows the API and the artifact store alone), so the page says how to
// follow it, and shows the environment's own rules.
import { h, table } from './dom.js';
import { get, enc } from './api.js';
import { errorBox } from './ui.js';

// SHOWN_RECORDS bounds what the page shows of a kept log; the link has it all.
const SHOWN_RECORDS = 500;

const bytes = (n) => (n == null ? '—' : n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / (1 << 20)).toFixed(1)} MiB`);

// destination is what a record reached for: the name it carried (and where
// the name came from) and the address and port.
const destination = (r) => {
  const at = r.proto === 'dns' ? '' : r.addr ? `${r.addr.includes(':') ? `[${r.addr}]` : r.addr}:${r.port}` : '';
  if (!r.name) return at || '—';
  return at ? `${r.name} (${r.nameFrom || 'dns'}) ${at}` : `${r.name}${r.type ? ` ${r.type}` : ''}`;
};

const row = (r) => {
  const refused = r.verdict === 'deny';
  const verdict = refused ? 'refused' : r.verdict === 'failed' ? 'failed' : 'allowed';
  return h('tr', { 'data-net-record': '', 'data-verdict': r.verdict || '', class: refused ? 'net-refused' : '' },
    h('td', { text: r.time ? new Date(r.time).toLocaleTimeString() : '—' }),
    h('td', { text: r.proto || '—' }),
    h('td', { text: destination(r) }),
    h('td', {}, h('span', { class: `verdict verdict-${verdict}`, text: verdict })),
    h('td', { text: `${r.rule || '—'}${r.error ? ` — ${r.error}` : ''}${r.suppressed ? ` (+${r.suppressed} not recorded)` : ''}` }),
    h('td', { text: r.proto === 'dns' ? (r.answers || []).join(', ') || '—' : `${bytes(r.sent)} / ${bytes(r.received)}` }));
};

export function netLogPanel() {
  const panel = h('section', { id: 'env-netlog', 'aria-labelledby': 'env-netlog-title' });
  let shownFor = '';

  const show = (...children) => panel.replaceChildren(h('h2', { id: 'env-netlog-title', text: 'Network log' }), ...children);

  const readKept = async (id) => {
    show(h('p', { class: 'muted', role: 'status', text: 'Reading the kept network log…' }));
    try {
      const l = await get(`/v1/environments/${enc(id)}/network-log`);
      if (!l.kept || !l.kept.url) throw new Error('the API gave no link to the kept network log');
      const res = await fetch(l.kept.url, { cache: 'no-store' });
      if (!res.ok) throw new Error(`the kept network log could not be downloaded: HTTP ${res.status}`);
      const records = [];
      for (const line of (await res.text()).split('\n')) {
        if (!line.trim()) continue;
        try { records.push(JSON.parse(line)); } catch { /* a line cut by the ring */ }
      }
      const refused = records.filter((r) => r.verdict === 'deny').length;
      const cut = records.length > SHOWN_RECORDS;
      const shown = cut ? records.slice(-SHOWN_RECORDS) : records;
      show(
        h('p', { class: 'muted', id: 'env-netlog-summary' },
          `${records.length} record${records.length === 1 ? '' : 's'}, ${refused} refused${cut ? `; the last ${SHOWN_RECORDS} shown` : ''}, as its node kept it (artifact ${l.kept.artifact}). `,
          h('a', { href: l.kept.url, download: '', text: 'Download it' })),
        records.length
          ? table(['Time', 'Protocol', 'Destination', 'Verdict', 'Rule', 'Sent / received'], shown.map(row), 'Connections and DNS questions, oldest first')
          : h('p', { class: 'muted', text: 'It opened no connection and asked no question.' }));
    } catch (err) {
      shownFor = '';
      show(errorBox(err));
    }
  };

  // update draws the panel for the environment as last read: hidden for
  // one that has no network log (a template of network none or egress).
  const update = (e) => {
    const live = ['pending', 'starting', 'ready', 'stopping'].includes(e.state);
    if (live && e.network) {
      shownFor = '';
      const n = e.network;
      show(
        h('p', { class: 'muted', id: 'env-netlog-live' },
          'The live network log is on the node that runs it, which the console does not connect to. Follow it with ',
          h('code', { text: `envlease net log ${e.id} -f` }), '; the log its node keeps is shown here once it ends.'),
        h('dl', { class: 'fields', id: 'env-network-rules' },
          h('dt', { text: 'Its own allow entries' }), h('dd', { text: n.allow.length ? n.allow.join(', ') : 'none (what the template allows)' }),
          h('dt', { text: 'Its own deny entries' }), h('dd', { text: n.deny.length ? n.deny.join(', ') : 'none' })));
      panel.hidden = false;
      return;
    }
    if (live || !e.networkLog) {
      shownFor = '';
      panel.hidden = true;
      panel.replaceChildren();
      return;
    }
    panel.hidden = false;
    if (shownFor === e.networkLog) return;
    shownFor = e.networkLog;
    readKept(e.id);
  };
  return { panel, update };
}
