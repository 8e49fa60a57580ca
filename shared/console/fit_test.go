package console_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// fitsJS lists what scrolls sideways on the page as it is drawn: the page
// itself (its scroll width against its client width), and any element
// that scrolls on its own (a table's wrapper, a log).
const fitsJS = `(() => {
  const problems = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth) problems.push('the page is ' + doc.scrollWidth + ' px wide in ' + doc.clientWidth + ' px');
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '');
  for (const el of document.querySelectorAll('body *')) {
    const s = getComputedStyle(el);
    if (s.overflowX !== 'auto' && s.overflowX !== 'scroll') continue;
    if (el.scrollWidth > el.clientWidth + 1) problems.push(name(el) + ' scrolls sideways: ' + el.scrollWidth + ' px in ' + el.clientWidth + ' px');
  }
  return problems;
})()`

// slipsJS lists the slips of a page's text: a limit shown as an empty or
// zero value where a template sets none, hours in mixed formats, values
// that were never there.
const slipsJS = `(() => {
  const problems = [];
  const text = document.querySelector('main').innerText;
  for (const bad of [/, ,/, /\b0 CPU/, /\b0 pids/, /undefined/, /NaN/, /\[object /]) {
    if (bad.test(text)) problems.push('the page shows ' + bad);
  }
  for (const td of document.querySelectorAll('td[data-label="Hours"]')) {
    if (!/^\d+\.\d\d$/.test(td.textContent)) problems.push('hours shown as ' + JSON.stringify(td.textContent));
  }
  return problems;
})()`

// fitPage is a page of the console as the seeded organization sees it.
type fitPage struct {
	name  string
	route string
	ready string
	// then is done once it is drawn (opening a link, say).
	then func(t *testing.T, b *browser)
}

// The console fits: with the data a user really has (seed), no page
// scrolls sideways at 1280 px or at a phone's 390 px. The screenshots of
// docs/console are taken here, of that data: ENVLEASE_CONSOLE_DOCS=1
// writes them into docs/console (docShot).
func TestConsoleFits(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t, seedTemplates())
	s := seed(t, stack)
	artifactRow := `[...document.querySelectorAll('tr[data-artifact]')].find((r) => r.textContent.includes('coverage-report'))`
	pages := []fitPage{
		{name: "environments", route: "#/environments", ready: `document.querySelectorAll('#env-list tr[data-id]').length >= 4 && document.querySelector('#env-list').textContent.includes('ready')`},
		{name: "environment", route: "#/environments/" + s.detail, ready: `!!document.querySelector('#env-detail [data-state="ready"]') && !!document.querySelector('#env-log-live')`},
		{name: "environment-paused", route: "#/environments/" + s.paused, ready: `!!document.querySelector('#env-detail [data-state="paused"]') && !!document.querySelector('#wake')`},
		{name: "environment-log", route: "#/environments/" + s.crashed, ready: `(document.querySelector('#env-log-text')?.textContent || '').includes(` + jsString(crashLine) + `)`},
		{name: "templates", route: "#/templates", ready: `document.querySelectorAll('article.card meter').length >= 4`},
		{name: "usage", route: "#/usage", ready: `!!document.querySelector('#usage table') && !!document.querySelector('svg.chart')`},
		{
			name: "artifacts", route: "#/artifacts", ready: `!!` + artifactRow,
			then: func(t *testing.T, b *browser) {
				id := eval[string](t, b, artifactRow+`.dataset.artifact`)
				b.do(t, "create a link", submit(`tr[data-artifact="`+id+`"] form`))
				b.until(t, "the link", `!!document.querySelector('#artifact-link .link-url')`)
			},
		},
		{name: "keys", route: "#/keys", ready: `document.querySelectorAll('tr[data-key]').length >= 21 && !!document.querySelector("form[aria-label='Trust a CI issuer']")`},
		{name: "sandboxes", route: "#/sandboxes", ready: `document.body.textContent.includes('alice-workstation-in-the-berlin-office')`},
		{name: "events", route: "#/events", ready: `document.querySelectorAll('#events tr[data-event]').length >= 10 && !!document.querySelector('#events [data-field=error]')`},
	}

	b := newBrowser(t)
	b.do(t, "open a sign-in link", chromedp.Navigate(stack.URL+"/#token="+clienttest.AliceToken))
	b.until(t, "the sign-in question", `!document.querySelector('#confirm').hidden && document.querySelector('#confirm-who').textContent.includes('alice')`)
	b.fits(t, "signin-confirm", 1280)
	b.docShot(t, "signin-confirm")
	b.do(t, "confirm the sign-in", chromedp.Click(chromedp.CSS("#confirm-signin")))
	b.until(t, "signed in", `!!sessionStorage.getItem('envlease.token') && !document.querySelector('#nav').hidden`)

	for _, w := range []struct {
		width, height int
		phone         bool
	}{{1280, 900, false}, {768, 1024, false}, {390, 844, true}} {
		size := chromedp.EmulateViewport(int64(w.width), int64(w.height))
		if w.phone {
			size = chromedp.EmulateViewport(int64(w.width), int64(w.height), chromedp.EmulateScale(2), chromedp.EmulateMobile)
		}
		b.do(t, fmt.Sprintf("%d px", w.width), size)
		for _, p := range pages {
			b.do(t, p.name, chromedp.Navigate(stack.URL+"/"+p.route))
			b.until(t, p.name+" drawn", `!document.body.textContent.includes('Loading…') && (`+p.ready+`)`)
			if p.then != nil {
				p.then(t, b)
			}
			b.fits(t, p.name, w.width)
			switch {
			case w.width == 1280:
				b.docShot(t, p.name)
			case p.name == "environments":
				b.docShot(t, "environments-phone")
			default:
				b.shot(t, fmt.Sprintf("fits-%s-%d", p.name, w.width))
			}
		}
	}
	checkDocShots(t)
}

func (b *browser) fits(t *testing.T, page string, width int) {
	t.Helper()
	problems := append(eval[[]string](t, b, fitsJS), eval[[]string](t, b, slipsJS)...)
	if len(problems) > 0 {
		b.shot(t, fmt.Sprintf("failed-fits-%s-%d", page, width))
	}
	for _, p := range problems {
		t.Errorf("%s at %d px: %s", page, width, p)
	}
}
