package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// auditJS checks the page as it is drawn, in the browser, and returns one
// line per problem:
//
//   - every control (input, select, textarea, button, link, summary) has an
//     accessible name: aria-labelledby, aria-label, a <label>, its text, or
//     a title;
//   - every visible text (and every control's own text, and placeholders)
//     meets WCAG AA contrast against its effective background: 4.5:1, or 3:1
//     for large text (24 px, or 18.66 px bold). The background is found by
//     compositing background colours up the ancestors until an opaque one.
//
// Disabled controls are exempt from contrast, as WCAG says.
const auditJS = `(() => {
  const problems = [];
  const describe = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    for (const a of ['name', 'type', 'href', 'class']) if (el.getAttribute(a)) s += '[' + a + '=' + JSON.stringify(el.getAttribute(a).slice(0, 40)) + ']';
    const t = (el.textContent || '').trim().slice(0, 30);
    return t ? s + ' "' + t + '"' : s;
  };
  const nameOf = (el) => {
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(/\s+/).map((id) => document.getElementById(id)?.textContent || '').join(' ').trim();
      if (t) return t;
    }
    const aria = (el.getAttribute('aria-label') || '').trim();
    if (aria) return aria;
    if (el.labels && el.labels.length) {
      const t = [...el.labels].map((l) => l.textContent).join(' ').trim();
      if (t) return t;
    }
    if (['BUTTON', 'A', 'SUMMARY'].includes(el.tagName)) {
      const t = (el.textContent || '').trim();
      if (t) return t;
    }
    if (el.tagName === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type) && el.value) return el.value;
    return (el.getAttribute('title') || '').trim();
  };
  for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea, button, a[href], summary, progress, meter')) {
    if (!nameOf(el)) problems.push('no accessible name: ' + describe(el));
  }

  const parse = (c) => {
    const m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)/.exec(c);
    if (!m) return null;
    return [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]];
  };
  const over = (top, under) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat([1]);
  };
  const lum = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (a, b) => {
    const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  // background composites every background colour from el up to the first
  // opaque one, over white (the canvas).
  const background = (el) => {
    const layers = [];
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) {
        layers.push(c);
        if (c[3] >= 1) break;
      }
    }
    let bg = [255, 255, 255, 1];
    for (const c of layers.reverse()) bg = over(c, bg);
    return bg;
  };
  const visible = (el) => {
    if (!el.getClientRects().length) return false;
    const cs = getComputedStyle(el);
    if (cs.visibility !== 'visible' || +cs.opacity === 0) return false;
    const r = el.getBoundingClientRect();
    // Off-screen on purpose (the skip link until focused).
    return r.right > 0 && r.bottom > 0 && r.width > 1 && r.height > 1;
  };
  const check = (el, colour, what) => {
    const cs = getComputedStyle(el);
    const fg = parse(colour);
    if (!fg) return;
    const bg = background(el);
    const size = parseFloat(cs.fontSize);
    const large = size >= 24 || (size >= 18.66 && +cs.fontWeight >= 700);
    const need = large ? 3 : 4.5;
    const r = ratio(over(fg, bg), bg);
    if (r < need) problems.push('contrast ' + r.toFixed(2) + ':1 < ' + need + ':1 (' + what + ' ' + colour + ' on rgb(' + bg.slice(0, 3).map(Math.round).join(',') + ')): ' + describe(el));
  };
  const all = document.body.querySelectorAll('*');
  for (const el of all) {
    if (['SCRIPT', 'STYLE', 'OPTION', 'TITLE', 'svg', 'defs', 'pattern'].includes(el.tagName)) continue;
    if (el.disabled || el.closest('[aria-hidden="true"]')) continue;
    if (!visible(el)) continue;
    const ownText = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const cs = getComputedStyle(el);
    if (el instanceof SVGElement) {
      if (el.tagName === 'text' && ownText) check(el, cs.fill, 'fill');
      continue;
    }
    if (ownText) check(el, cs.color, 'text');
    if (['INPUT', 'TEXTAREA'].includes(el.tagName) && el.type !== 'file') {
      if (el.value) check(el, cs.color, 'value');
      else if (el.placeholder) check(el, getComputedStyle(el, '::placeholder').color, 'placeholder');
    }
    if (el.tagName === 'TD' && el.dataset.label) {
      const before = getComputedStyle(el, '::before');
      if (before.content && before.content !== 'none') check(el, before.color, 'cell label');
    }
  }
  return problems;
})()`

// audit runs auditJS on the page as it is now and fails the test for each
// problem found, with a screenshot.
func (b *browser) audit(t *testing.T, page string) {
	t.Helper()
	problems := eval[[]string](t, b, auditJS)
	if len(problems) > 0 {
		b.shot(t, "audit-"+page)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", page, p)
	}
}

// focusedJS describes the element that has the focus (its tag and its name:
// label, aria-label or text) and whether the focus can be seen: an outline
// at least 2 px wide (style.css draws one whose colour has 3:1 contrast with
// white and with the dark header).
const focusedJS = `(() => {
  const el = document.activeElement;
  if (!el || el === document.body) return { what: 'body', ring: false };
  const cs = getComputedStyle(el);
  const label = el.labels && el.labels.length ? el.labels[0].textContent : '';
  const name = (label || el.getAttribute('aria-label') || el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 40);
  const ring = cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2;
  return { what: el.tagName.toLowerCase() + ' ' + name, ring, colour: cs.outlineColor };
})()`

type focus struct {
	What   string `json:"what"`
	Ring   bool   `json:"ring"`
	Colour string `json:"colour"`
}

// tabThrough presses Tab up to n times from where the focus is, and returns
// every element the focus reached, in order. Every stop must show a focus
// ring.
func (b *browser) tabThrough(t *testing.T, n int) []string {
	t.Helper()
	var seen []string
	for i := 0; i < n; i++ {
		b.do(t, "press Tab", chromedp.KeyEvent(kb.Tab))
		f := eval[focus](t, b, focusedJS)
		if f.What == "body" {
			break
		}
		if !f.Ring {
			t.Errorf("focus on %s is not visible (no outline)", f.What)
		}
		seen = append(seen, f.What)
	}
	return seen
}

// reached fails the test unless every wanted stop (a prefix of a stop's
// description) is among those the focus reached.
func reached(t *testing.T, page string, stops []string, want ...string) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, s := range stops {
			if strings.HasPrefix(s, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: Tab never reaches %q; it reached %s", page, w, strings.Join(stops, " | "))
		}
	}
}

// key presses one key on the focused element.
func (b *browser) key(t *testing.T, k string) {
	t.Helper()
	b.do(t, fmt.Sprintf("press %q", k), chromedp.KeyEvent(k))
}

// focusOn puts the focus on the first element matching sel, as a click
// would not (a click shows no focus ring); Tab goes on from there.
func (b *browser) focusOn(t *testing.T, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const e = document.querySelector(`+jsString(sel)+`); if (!e) return false; e.focus(); return true; })()`)); err != nil {
		t.Fatalf("focus %s: %v", sel, err)
	}
}
