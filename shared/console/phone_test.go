package console_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// phoneJS checks a page at phone width: nothing scrolls sideways, and every
// table shows its rows as cards, each cell led by its column's name (the
// header row takes no room), and the chart's labels keep a readable size.
const phoneJS = `(() => {
  const problems = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth) problems.push('the page is ' + doc.scrollWidth + ' px wide in a ' + window.innerWidth + ' px window');
  for (const w of document.querySelectorAll('.table-wrap')) {
    if (w.scrollWidth > w.clientWidth + 1) problems.push('a table scrolls sideways: ' + w.scrollWidth + ' px in ' + w.clientWidth);
  }
  for (const table of document.querySelectorAll('table.rows')) {
    const head = table.querySelector('thead').getBoundingClientRect();
    if (head.height > 1) problems.push('the header row takes ' + head.height + ' px');
    // Cards are still a table to a screen reader: the roles say so.
    if (table.getAttribute('role') !== 'table' || table.querySelector('tr:not([role=row]), td:not([role=cell]), thead th:not([role=columnheader])')) {
      problems.push('a table lacks its roles');
    }
    const names = [...table.querySelectorAll('thead th')].map((th) => th.textContent);
    for (const tr of table.querySelectorAll('tbody tr')) {
      [...tr.children].forEach((cell, i) => {
        if (!names[i]) return;
        const shown = getComputedStyle(cell, '::before').content;
        if (shown !== JSON.stringify(names[i])) problems.push('a cell of ' + JSON.stringify(names[i]) + ' is labelled ' + shown);
      });
      const r = tr.getBoundingClientRect();
      if (r.right > window.innerWidth) problems.push('a row ends at ' + r.right + ' px');
    }
  }
  for (const text of document.querySelectorAll('svg.chart text')) {
    const h = text.getBoundingClientRect().height;
    if (h < 10) problems.push('chart text "' + text.textContent + '" is ' + h.toFixed(1) + ' px high');
  }
  return problems;
})()`

// At 375 px (a small phone) every list is readable without scrolling
// sideways: the rows are stacked cards with their column names. The
// screenshots are kept like the others.
func TestConsolePhoneWidth(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	for _, name := range []string{"review-42", "nightly-build-with-a-long-name"} {
		apiCall(t, stack.URL, clienttest.AliceToken, "POST", "/v1/environments", map[string]any{"template": "sleeper", "name": name,
			"labels": map[string]string{"team": "web", "branch": "feature/phone-width-cards-for-every-list"}}, nil)
	}
	apiCall(t, stack.URL, clienttest.AliceToken, "POST", "/v1/tokens", map[string]any{"name": "laptop", "source": "console"}, nil)
	file := filepath.Join(t.TempDir(), "release-notes-2026-11.txt")
	if err := os.WriteFile(file, []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.do(t, "phone", chromedp.EmulateViewport(375, 812, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.signInByLink(t, stack.URL, clienttest.AliceToken)
	b.until(t, "the list", `document.querySelectorAll('#env-list tr[data-id]').length === 2 && document.querySelector('#env-list').textContent.includes('ready')`)
	b.phone(t, "environments")
	b.shot(t, "phone-environments")

	b.do(t, "detail", chromedp.Click(chromedp.CSS("#env-list tr[data-id] a")))
	b.until(t, "the detail", `!!document.querySelector('#env-detail [data-state]')`)
	b.phone(t, "environment")
	b.shot(t, "phone-environment")

	b.do(t, "artifacts", chromedp.Navigate(stack.URL+"/#/artifacts"), chromedp.WaitVisible(chromedp.CSS("details.panel summary")))
	b.do(t, "upload",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.SetUploadFiles(chromedp.CSS("input[type=file]"), []string{file}),
		chromedp.SendKeys(chromedp.CSS("form[aria-label='Upload an artifact'] input[name=labels]"), "release=2026-11"),
		submit("form[aria-label='Upload an artifact']"))
	b.until(t, "listed", `!!document.querySelector('tr[data-artifact]')`)
	b.do(t, "fold the panel", chromedp.Click(chromedp.CSS("details.panel summary")))
	b.phone(t, "artifacts")
	b.shot(t, "phone-artifacts")

	for _, p := range []struct{ page, ready string }{
		{"keys", `[...document.querySelectorAll('tr[data-key]')].some(r => r.textContent.includes('laptop'))`},
		{"usage", `!!document.querySelector('#usage a[download]')`},
		{"templates", `document.querySelectorAll('article.card meter').length >= 2`},
		{"sandboxes", `!document.body.textContent.includes('Loading…')`},
	} {
		b.do(t, p.page, chromedp.Navigate(stack.URL+"/#/"+p.page))
		b.until(t, p.page+" drawn", p.ready)
		b.phone(t, p.page)
		b.shot(t, "phone-"+p.page)
	}
}

func (b *browser) phone(t *testing.T, page string) {
	t.Helper()
	problems := eval[[]string](t, b, phoneJS)
	if len(problems) > 0 {
		b.shot(t, "failed-phone-"+page)
	}
	for _, p := range problems {
		t.Errorf("%s at 375 px: %s", page, p)
	}
}
