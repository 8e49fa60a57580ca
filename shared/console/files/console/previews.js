// An environment's preview links on its page: make one per export, copy
// it, open it, revoke it. The links open the export straight at its node;
// the console only asks the API for them.
import { h, timeEl, table, copyButton } from './dom.js';
import { get, post, del, enc } from './api.js';
import { errorBox } from './ui.js';

const LIFETIMES = [['1h', '1 hour'], ['4h', '4 hours'], ['24h', '24 hours'], ['15m', '15 minutes']];

export function previewsPanel(id) {
  const panel = h('section', { id: 'env-previews', 'aria-labelledby': 'env-previews-title' });
  const status = h('div', { role: 'status', class: 'hint' });
  let env = null;
  let previews = null;
  let loadedFor = '';

  const load = async () => {
    try {
      previews = (await get(`/v1/environments/${enc(id)}/previews`)).previews;
    } catch (err) {
      previews = [];
      status.replaceChildren(errorBox(err));
    }
    draw();
  };

  const make = async (exp, select) => {
    try {
      const p = await post(`/v1/environments/${enc(id)}/previews`, { export: exp, expires: select.value });
      status.replaceChildren(h('p', { text: `Preview link for ${exp} made; copy it below.` }));
      await load();
      document.querySelector(`[data-preview="${CSS.escape(p.id)}"] button`)?.focus();
    } catch (err) { status.replaceChildren(errorBox(err)); }
  };

  const revoke = async (p) => {
    try {
      await del(`/v1/environments/${enc(id)}/previews/${enc(p.id)}`);
      status.replaceChildren(h('p', { text: `Preview link for ${p.export} revoked: it opens nothing within seconds.` }));
      await load();
    } catch (err) { status.replaceChildren(errorBox(err)); }
  };

  const draw = () => {
    const parts = [h('h2', { id: 'env-previews-title', text: 'Preview links' })];
    if (!env || env.state !== 'ready') {
      parts.push(h('p', { class: 'muted', text: 'Preview links open once the environment is ready.' }));
      panel.replaceChildren(...parts);
      return;
    }
    parts.push(h('p', { class: 'hint', text: 'A link opens the export in any browser until it expires or is revoked. Whoever holds it can open the export: share it as you would a password.' }));
    const makers = env.exports.filter((x) => x.target).map((x) => {
      const select = h('select', { 'aria-label': `How long the ${x.service} link opens` },
        LIFETIMES.map(([v, t]) => h('option', { value: v, text: t })));
      return h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', 'data-make-preview': x.service, text: `Make a link to ${x.service}`, onclick: () => make(x.service, select) }),
        select);
    });
    parts.push(...makers);
    // The service shows a link again only to whoever made it, and only when
    // it ends no later than this sign-in: the others are listed, to revoke.
    const live = (previews || []).filter((p) => !p.revoked && new Date(p.expires) > new Date());
    parts.push(live.length
      ? table(['Export', 'Expires', 'Link', ''], live.map((p) => {
        const copied = h('span', { role: 'status', class: 'hint' });
        const revokeButton = h('button', { type: 'button', class: 'danger', text: 'Revoke', onclick: () => revoke(p) });
        if (!p.url) {
          return h('tr', { 'data-preview': p.id },
            h('td', { text: p.export }),
            h('td', {}, timeEl(p.expires)),
            h('td', { class: 'muted', text: `Link hidden: it is shown only to its maker (${p.createdBy}), on a sign-in that lasts as long as it` }),
            h('td', {}, h('div', { class: 'actions' }, revokeButton)));
        }
        return h('tr', { 'data-preview': p.id },
          h('td', { text: p.export }),
          h('td', {}, timeEl(p.expires)),
          h('td', {}, h('a', { href: p.url, target: '_blank', rel: 'noopener noreferrer', text: `Open ${p.host}` })),
          h('td', {}, h('div', { class: 'actions' }, copyButton(p.url, copied, 'Copy link'), revokeButton, copied)));
      }))
      : h('p', { class: 'muted', text: previews ? 'No open preview links.' : 'Loading…' }));
    parts.push(status);
    panel.replaceChildren(...parts);
  };

  // update takes the environment as the page last read it; the links are
  // read once it is ready, and again after each change made here.
  const update = (e) => {
    const was = env?.state;
    env = e;
    if (e.state === 'ready' && loadedFor !== e.id) {
      loadedFor = e.id;
      load();
    }
    if (was !== e.state || !panel.firstChild) draw();
  };
  return { panel, update };
}
