// Artifacts: the unexpired ones, newest first; upload straight to object
// storage through the presigned URL; signed download links.
import { h, field, labels, parseLabels, timeEl, bytes, table, copyButton } from './dom.js';
import { all, post, enc } from './api.js';
import { errorBox, guard } from './ui.js';

export const title = 'Artifacts';

// The browser sets these itself and refuses them from scripts.
const FORBIDDEN = new Set(['content-length', 'host', 'connection']);

export function render(root) {
  const list = h('div', {}, h('p', { text: 'Loading…' }));
  const out = h('div', { id: 'artifact-result' });
  const linkOut = h('div', { id: 'artifact-link', 'aria-live': 'polite' });
  const refresh = () => guard(list, async () => {
    const arts = await all('/v1/artifacts?limit=200', 'artifacts');
    arts.sort((a, b) => (a.created < b.created ? 1 : -1));
    if (!arts.length) { list.replaceChildren(h('p', { text: 'No artifacts.' })); return; }
    list.replaceChildren(table(['Name', ['Size', 'num'], 'Labels', 'Created', 'Expires', 'Link'],
      arts.map((a) => h('tr', { 'data-artifact': a.id },
        h('td', {}, h('span', { text: a.name }), h('div', { class: 'hint' }, h('code', { text: a.id }))),
        h('td', { class: 'num', text: bytes(a.size) }), h('td', {}, labels(a.labels)),
        h('td', {}, timeEl(a.created)), h('td', {}, timeEl(a.expires)),
        h('td', {}, linkForm(a, linkOut))))));
  });
  root.append(h('h1', { text: 'Artifacts' }), uploadForm(out, refresh), out, linkOut, list);
  refresh();
}

function linkForm(a, res) {
  const expiry = h('select', { name: 'expires' },
    [['15m', '15 minutes'], ['1h', '1 hour'], ['24h', '1 day'], ['168h', '7 days']].map(([v, t]) => h('option', { value: v, text: t })));
  expiry.value = '1h';
  return h('form', {
    class: 'row', 'aria-label': `Signed link for ${a.name}`,
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        const l = await post(`/v1/artifacts/${enc(a.id)}/links`, { expires: expiry.value });
        const status = h('span', { role: 'status', class: 'hint' });
        res.replaceChildren(h('div', { class: 'panel' },
          h('strong', { text: `Signed link to ${a.name}` }),
          h('code', { class: 'link-url', text: l.url }),
          h('div', { class: 'actions' }, copyButton(l.url, status, 'Copy link'),
            h('a', { class: 'button secondary', href: l.url, download: a.name, rel: 'noreferrer', text: 'Download' }), status),
          h('div', { class: 'hint' }, 'Valid until ', timeEl(l.expires))));
      } catch (err) { res.replaceChildren(errorBox(err)); }
    },
  }, field('Valid for', expiry), h('button', { type: 'submit', class: 'secondary', text: 'Create link' }));
}

function uploadForm(out, done) {
  const file = h('input', { type: 'file', name: 'file', required: true });
  const lbls = h('input', { name: 'labels', placeholder: 'build=42' });
  const expires = h('input', { name: 'expires', placeholder: '168h' });
  const progress = h('progress', { max: 100, value: 0, id: 'upload-progress' });
  const pl = h('label', { for: 'upload-progress', text: 'Upload progress' });
  const status = h('p', { role: 'status', class: 'hint' });
  const submit = h('button', { type: 'submit', text: 'Upload' });
  const form = h('form', {
    class: 'stack', 'aria-label': 'Upload an artifact',
    onsubmit: async (e) => {
      e.preventDefault();
      const f = file.files[0];
      if (!f) return;
      submit.disabled = true;
      out.replaceChildren();
      try {
        const body = { name: f.name, size: f.size, contentType: f.type || 'application/octet-stream', labels: parseLabels(lbls.value) };
        if (expires.value.trim()) body.expires = expires.value.trim();
        status.textContent = 'Computing SHA-256…';
        const buf = await f.arrayBuffer();
        body.sha256 = hex(await crypto.subtle.digest('SHA-256', buf));
        status.textContent = 'Creating…';
        const created = await post('/v1/artifacts', body);
        for (const part of created.upload.parts) {
          status.textContent = `Uploading part ${part.partNumber} of ${created.upload.parts.length}…`;
          await put(part, f.slice(part.offset, part.offset + part.size), (sent) => {
            progress.value = Math.round(((part.offset + sent) / Math.max(f.size, 1)) * 100);
          });
        }
        progress.value = 100;
        status.textContent = 'Verifying…';
        const sealed = await post(`/v1/artifacts/${enc(created.artifact.id)}/complete`);
        status.textContent = `Uploaded ${sealed.name} (${bytes(sealed.size)}), ${sealed.state}.`;
        form.reset();
        done();
      } catch (err) {
        status.textContent = 'Upload failed.';
        if (err.status !== 401) out.replaceChildren(errorBox(err));
      } finally {
        submit.disabled = false;
      }
    },
  }, field('File', file), field('Labels', lbls, 'key=value, comma separated'), field('Expires after', expires, 'default 7 days'),
  pl, progress, status, h('div', {}, submit));
  return h('details', { class: 'panel' }, h('summary', { text: 'Upload an artifact' }), form);
}

function put(part, blob, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(part.method || 'PUT', part.url);
    for (const [k, v] of Object.entries(part.headers || {})) {
      if (!FORBIDDEN.has(k.toLowerCase())) xhr.setRequestHeader(k, v);
    }
    xhr.upload.onprogress = (e) => onProgress(e.loaded);
    xhr.onload = () => (xhr.status < 300 ? resolve() : reject(Object.assign(new Error(`object storage answered ${xhr.status}: ${xhr.responseText.slice(0, 200)}`), { storageStatus: xhr.status })));
    xhr.onerror = () => reject(new Error('the upload could not reach object storage (network or CORS)'));
    xhr.send(blob);
  });
}

function hex(buf) {
  return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
}
