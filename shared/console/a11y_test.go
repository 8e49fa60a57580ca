package console_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/envlease/envlease/shared/clienttest"
)

// Every page, drawn in the real browser, passes the audit (names and
// contrast), and keyboard alone does the work: Tab reaches each page's main
// controls with a visible focus, Enter signs in, opens panels, submits forms
// and follows links, and Escape folds a panel or cancels the delete
// confirmation, giving the focus back.
func TestConsoleAccessibility(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	apiCall(t, stack.URL, clienttest.AliceToken, "POST", "/v1/environments",
		map[string]any{"template": "sleeper", "name": "review-7", "labels": map[string]string{"team": "web"}}, nil)
	b := newBrowser(t)

	// Sign in with the keyboard: type the token, press Enter.
	b.do(t, "open the console", chromedp.Navigate(stack.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	// The audit finds what it looks for: a nameless button and grey text.
	planted := eval[[]string](t, b, `(() => {
		const d = document.createElement('div'); d.id = 'planted';
		const bad = document.createElement('p'); bad.textContent = 'faint'; bad.style.color = '#aaaaaa';
		d.append(document.createElement('button'), bad); document.body.append(d);
		const out = `+auditJS+`; d.remove(); return out; })()`)
	if len(planted) != 2 {
		t.Errorf("the audit of a nameless button and #aaa text on white found %q, want those two", planted)
	}
	b.audit(t, "signin")
	b.focusOn(t, "#token")
	reached(t, "signin", b.tabThrough(t, 3), "button Sign in")
	b.focusOn(t, "#token")
	b.key(t, clienttest.AliceToken)
	b.key(t, kb.Enter)
	b.until(t, "the environment listed", `document.querySelector('#env-list')?.textContent.includes('review-7')`)
	b.audit(t, "environments")

	// From the top of the freshly loaded page: the skip link, the sections,
	// sign-out, the lease panel, the filters and the environments.
	b.do(t, "reload", chromedp.Reload())
	b.until(t, "the list again", `!!document.querySelector('#env-list tr[data-id]')`)
	stops := b.tabThrough(t, 30)
	reached(t, "environments", stops, "a Skip to content", "a Environments", "a Templates and quotas", "a Usage",
		"a Artifacts", "a Keys and tokens", "a Sandboxes", "button Sign out", "summary Lease an environment",
		"select State", "input Label", "input Template", "a review-7")

	// The lease panel opens with Enter, folds with Escape, and its form
	// submits with Enter.
	b.focusOn(t, "details.panel summary")
	b.key(t, kb.Enter)
	b.until(t, "the lease panel open", `document.querySelector('details.panel').open && !!document.querySelector('form[aria-label="Lease an environment"] option[value=sleeper]')`)
	b.audit(t, "environments-lease")
	b.key(t, kb.Escape)
	b.until(t, "the panel folded, focus on its summary", `!document.querySelector('details.panel').open && document.activeElement === document.querySelector('details.panel summary')`)
	b.key(t, kb.Enter)
	b.do(t, "choose sleeper", chromedp.SetValue(chromedp.CSS("form[aria-label='Lease an environment'] select"), "sleeper"))
	b.focusOn(t, "form[aria-label='Lease an environment'] input[name=name]")
	b.key(t, "by-keyboard")
	b.key(t, kb.Enter)
	b.until(t, "leased", `document.body.textContent.includes('Leased by-keyboard')`)

	// Enter follows the link to the new environment; Delete asks first,
	// with the focus on the question's button; Escape cancels and gives the
	// focus back to Delete.
	b.focusOn(t, "[role=status] a[href^='#/environments/']")
	b.key(t, kb.Enter)
	b.until(t, "the detail", `!!document.querySelector('#delete')`)
	b.audit(t, "environment")
	stops = b.tabThrough(t, 15)
	reached(t, "environment", stops, "a ← All environments", "button Touch", "button Delete")
	b.focusOn(t, "#delete")
	b.key(t, kb.Enter)
	b.until(t, "the confirmation, focused", `document.activeElement?.id === 'confirm-delete'`)
	b.audit(t, "environment-confirm")
	b.key(t, kb.Escape)
	b.until(t, "cancelled, focus back on Delete", `!document.querySelector('#confirm-delete') && document.activeElement?.id === 'delete'`)
	b.key(t, kb.Enter)
	b.until(t, "asked again", `document.activeElement?.id === 'confirm-delete'`)
	b.key(t, kb.Enter)
	b.until(t, "deleted", `['stopping','stopped'].includes(document.querySelector('#env-detail [data-state]')?.dataset.state)`)

	b.do(t, "templates page", chromedp.Navigate(stack.URL+"/#/templates"))
	b.until(t, "the quotas", `document.querySelectorAll('article.card meter').length >= 2`)
	b.audit(t, "templates")
	b.focusOn(t, "#main")
	reached(t, "templates", b.tabThrough(t, 10), "a Live environments of")

	b.do(t, "usage page", chromedp.Navigate(stack.URL+"/#/usage"))
	b.until(t, "the usage", `!!document.querySelector('#usage a[download]')`)
	b.audit(t, "usage")
	b.focusOn(t, "#main")
	reached(t, "usage", b.tabThrough(t, 10), "input From (UTC day)", "button Show", "a Download CSV")
	// An API error (a range too far back) shows its message and request id,
	// and passes the audit too.
	b.do(t, "ask too far back", chromedp.SetValue(chromedp.CSS("input[name=since]"), "2001-01-01"))
	b.focusOn(t, "form[aria-label='Usage range'] button[type=submit]")
	b.key(t, kb.Enter)
	b.until(t, "the error", `!!document.querySelector('#usage .error .rid code')`)
	b.audit(t, "usage-error")

	file := filepath.Join(t.TempDir(), "a11y.txt")
	if err := os.WriteFile(file, []byte("accessible\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do(t, "artifacts page", chromedp.Navigate(stack.URL+"/#/artifacts"), chromedp.WaitVisible(chromedp.CSS("details.panel summary")))
	b.do(t, "upload",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.SetUploadFiles(chromedp.CSS("input[type=file]"), []string{file}),
		submit("form[aria-label='Upload an artifact']"))
	// Other artifacts may be listed already (ended environments' kept
	// logs): wait for the one uploaded here, whose upload has then ended.
	b.until(t, "listed", `[...document.querySelectorAll('tr[data-artifact]')].some(r => r.textContent.includes('a11y.txt'))`)
	b.focusOn(t, "tr[data-artifact] form button[type=submit]")
	b.key(t, kb.Enter)
	b.until(t, "the link", `!!document.querySelector('#artifact-link .link-url')`)
	b.audit(t, "artifacts")
	b.focusOn(t, "#main")
	reached(t, "artifacts", b.tabThrough(t, 20), "summary Upload an artifact", "input File", "button Upload", "button Copy link", "a Download", "select Valid for", "button Create link")

	b.do(t, "keys page", chromedp.Navigate(stack.URL+"/#/keys"), chromedp.WaitVisible(chromedp.CSS("form[aria-label='Create a key']")))
	b.focusOn(t, "form[aria-label='Create a key'] input[name=name]")
	b.key(t, "a11y-bot")
	b.key(t, kb.Enter)
	b.until(t, "the token shown", `!!document.querySelector('[data-secret]') && [...document.querySelectorAll('tr[data-key]')].some(r => r.textContent.includes('a11y-bot'))`)
	b.audit(t, "keys")
	b.focusOn(t, "#main")
	reached(t, "keys", b.tabThrough(t, 20), "select Kind", "input Name", "button Create", "button Copy", "button Revoke")

	b.do(t, "sandboxes page", chromedp.Navigate(stack.URL+"/#/sandboxes"))
	b.until(t, "the sandboxes", `document.querySelector('#page h1')?.textContent === 'Sandboxes' && !document.body.textContent.includes('Loading…')`)
	b.audit(t, "sandboxes")

	// The same pages at a phone's width.
	b.do(t, "phone width", chromedp.EmulateViewport(375, 812))
	for _, p := range []struct{ page, ready string }{
		{"environments", `!!document.querySelector('#env-list tr[data-id]')`},
		{"templates", `document.querySelectorAll('article.card meter').length >= 2`},
		{"usage", `!!document.querySelector('#usage a[download]')`},
		{"artifacts", `!!document.querySelector('tr[data-artifact]')`},
		{"keys", `!!document.querySelector('tr[data-key]')`},
		{"sandboxes", `!document.body.textContent.includes('Loading…')`},
	} {
		b.do(t, p.page+" at phone width", chromedp.Navigate(stack.URL+"/#/"+p.page))
		b.until(t, p.page+" drawn", p.ready)
		b.audit(t, p.page+"-phone")
	}
}
