// An environment's log on its page. Once it ended, the log its node kept
// (an artifact) is read through its signed link. While it runs the log is
// live on its node only, which the console does not connect to (its
// Content-Security-Policy allows the API and the artifact store alone), so
// the page says how to follow it instead.
import { h } from './dom.js';
import { get, enc } from './api.js';
import { errorBox } from './ui.js';

// SHOWN_LINES bounds what the page shows of a kept log; the link has it all.
const SHOWN_LINES = 2000;

// MARK begins every line of the node's own in a log (package logline); an
// environment's output never holds it.
const MARK = '\x1e';

// escapeControls shows the C0 controls but tab, DEL and the C1 controls as
// escapes (\x1b, \u009b), as the CLI does on a terminal: the page never
// passes an environment's escape sequences on (to a copy and paste into a
// terminal, say). Bytes that were not UTF-8 are already U+FFFD here.
const escapeControls = (s) => s.replace(/[\x00-\x08\x0a-\x1f\x7f-\x9f]/g, (c) => {
  const n = c.charCodeAt(0);
  return n < 0x80 ? `\\x${n.toString(16).padStart(2, '0')}` : `\\u${n.toString(16).padStart(4, '0')}`;
});

// logLine is one line of a log on the page: the node's lines (without
// their mark) in an element of their own, marked as the node's; the
// environment's escaped, and after a backslash when they would read as a
// node's.
const logLine = (line) => {
  if (line.startsWith(MARK)) return h('span', { class: 'log-node', text: escapeControls(line.slice(1)) });
  const text = escapeControls(line);
  return text.startsWith('[envlease') ? `\\${text}` : text;
};

export function logPanel() {
  const panel = h('section', { id: 'env-log', 'aria-labelledby': 'env-log-title' });
  let shownFor = '';

  const show = (...children) => panel.replaceChildren(h('h2', { id: 'env-log-title', text: 'Log' }), ...children);

  const readKept = async (id) => {
    show(h('p', { class: 'muted', role: 'status', text: 'Reading the kept log…' }));
    try {
      const l = await get(`/v1/environments/${enc(id)}/logs`);
      if (!l.kept || !l.kept.url) throw new Error('the API gave no link to the kept log');
      const res = await fetch(l.kept.url, { cache: 'no-store' });
      if (!res.ok) throw new Error(`the kept log could not be downloaded: HTTP ${res.status}`);
      const lines = (await res.text()).replace(/\n$/, '').split('\n');
      const cut = lines.length > SHOWN_LINES;
      show(
        h('p', { class: 'muted' },
          cut ? `Its last ${SHOWN_LINES} of ${lines.length} lines, as its node kept it (artifact ${l.kept.artifact}). ` : `As its node kept it (artifact ${l.kept.artifact}). `,
          h('a', { href: l.kept.url, download: '', text: 'Download it' })),
        h('pre', { class: 'log', id: 'env-log-text', tabindex: '0', 'aria-label': 'Log' },
          ...(cut ? lines.slice(-SHOWN_LINES) : lines).flatMap((line, i) => (i ? ['\n', logLine(line)] : [logLine(line)]))));
    } catch (err) {
      shownFor = '';
      show(errorBox(err));
    }
  };

  // update draws the panel for the environment as last read; a kept log is
  // read once.
  const update = (e) => {
    if (['pending', 'starting', 'ready', 'stopping'].includes(e.state)) {
      shownFor = '';
      show(h('p', { class: 'muted', id: 'env-log-live' },
        'The live log is on the node that runs it, which the console does not connect to. Follow it with ',
        h('code', { text: `envlease logs ${e.id} -f` }), '; the log its node keeps is shown here once it ends.'));
      return;
    }
    if (!e.log) {
      shownFor = '';
      show(h('p', { class: 'muted', id: 'env-log-none', text: 'Its node kept no log (yet): an older agent keeps none, and one that just ended may still be uploading it.' }));
      return;
    }
    if (shownFor === e.log) return;
    shownFor = e.log;
    readKept(e.id);
  };
  return { panel, update };
}
