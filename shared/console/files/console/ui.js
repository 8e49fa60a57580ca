// Shared page furniture: how an API error is shown, and the page context.
import { h } from './dom.js';

// errorBox says what failed with the API's own message and the request id
// (for the logs). A quota refusal names the full template and links to its
// live environments, which is where one would free a lease.
export function errorBox(err, context = {}) {
  const parts = [h('strong', { text: 'Error: ' }), h('span', { class: 'msg', text: err.message })];
  if (err.code === 'quota' && context.template) {
    parts.push(h('p', {},
      `Template "${context.template}" is at its quota of live environments. `,
      h('a', { href: `#/environments?template=${encodeURIComponent(context.template)}`, text: `See the live environments of ${context.template}` }),
      ' and delete one first.'));
  }
  if (err.requestId) parts.push(h('div', { class: 'rid' }, 'Request id: ', h('code', { text: err.requestId })));
  return h('div', { class: 'panel error', role: 'alert' }, parts);
}

// guard runs f and shows its failure in place of where its result would go.
export async function guard(target, f, context) {
  try {
    return await f();
  } catch (err) {
    if (err.status === 401) return undefined;
    target.replaceChildren(errorBox(err, context));
    return undefined;
  }
}

// A page is {title, render(root, params, ctx)} and may return a cleanup.
export const ctx = { whoami: null };
