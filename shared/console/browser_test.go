package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// wait is how long any one condition may take: generous, because the
// machine may be busy; a test never asserts how fast anything is.
const wait = 90 * time.Second

func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.shot(t, "failed-"+strings.ReplaceAll(what, " ", "-"))
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript condition to hold.
func (b *browser) until(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(wait))); err != nil {
		b.shot(t, "failed-"+strings.ReplaceAll(what, " ", "-"))
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

func apiCall(t *testing.T, base, token, method, path string, body any, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
}

const xssLabel = `<img src=x onerror=alert(1)>`

// One person's session through the whole stack in a real browser: every
// page, each action the console offers, and the things it must never do.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	b := newBrowser(t)
	// An environment leased elsewhere (the CLI, say) with a label that is
	// markup: the page must show it as text. Only the sleeper template is
	// leased here: the fixture's shell listens on a fixed port that other
	// packages' tests use at the same time.
	apiCall(t, stack.URL, clienttest.AliceToken, "POST", "/v1/environments",
		map[string]any{"template": "sleeper", "name": "review-42", "labels": map[string]string{"team": "web", "note": xssLabel}}, nil)

	b.do(t, "open the console", chromedp.Navigate(stack.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	b.shot(t, "signin")
	b.do(t, "sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), clienttest.AliceToken),
		submit("#signin-form"))
	b.until(t, "the environment listed", `!!document.querySelector('#env-list tr[data-id] a') && document.querySelector('#env-list').textContent.includes('review-42')`)
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token')`); s != clienttest.AliceToken {
		t.Errorf("sessionStorage token %q", s)
	}
	if n := eval[int](t, b, `localStorage.length + document.cookie.length`); n != 0 {
		t.Errorf("the console wrote %d to localStorage or cookies", n)
	}
	// The XSS label: shown as its text, no element made of it.
	shown := eval[bool](t, b, `[...document.querySelectorAll('#env-list .label')].some(e => e.textContent === 'note=' + `+jsString(xssLabel)+`)`)
	if !shown {
		t.Errorf("the label %q is not shown as text", xssLabel)
	}
	if n := eval[int](t, b, `document.querySelectorAll('main img').length`); n != 0 {
		t.Errorf("%d <img> elements in the page: a label became markup", n)
	}
	b.shot(t, "environments")

	// Lease from a template and watch it become ready.
	b.do(t, "lease",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.WaitReady(chromedp.CSS("form[aria-label='Lease an environment'] select option[value='sleeper']")),
		chromedp.SetValue(chromedp.CSS("form[aria-label='Lease an environment'] select"), "sleeper"),
		chromedp.SendKeys(chromedp.CSS("form[aria-label='Lease an environment'] input[name='name']"), "from-console"),
		chromedp.SendKeys(chromedp.CSS("form[aria-label='Lease an environment'] textarea"), "made=console"),
		submit("form[aria-label='Lease an environment']"))
	b.until(t, "the lease answered", `document.body.textContent.includes('Leased from-console')`)
	b.do(t, "open the new environment", chromedp.Click(chromedp.CSS("[role=status] a[href^='#/environments/']")))
	b.until(t, "it turns ready", `!!document.querySelector('#env-detail [data-state="ready"]')`)
	b.shot(t, "environment")
	b.do(t, "delete it", chromedp.Click(chromedp.CSS("#delete")), chromedp.Click(chromedp.CSS("#confirm-delete")))
	b.until(t, "it stops", `['stopping','stopped'].includes(document.querySelector('#env-detail [data-state]')?.dataset.state)`)

	// A key: shown once, then never again; then revoked.
	b.do(t, "keys page", chromedp.Navigate(stack.URL+"/#/keys"), chromedp.WaitVisible(chromedp.CSS("form[aria-label='Create a key']")))
	b.do(t, "create a key",
		chromedp.SetValue(chromedp.CSS("select[name=kind]"), "key"),
		chromedp.SendKeys(chromedp.CSS("input[name=name]"), "ci-bot"),
		submit("form[aria-label='Create a key']"))
	b.until(t, "the key shown", `(document.querySelector('[data-secret]')?.textContent || '').startsWith('els_')`)
	secret := eval[string](t, b, `document.querySelector('[data-secret]').textContent`)
	b.until(t, "the key listed", `[...document.querySelectorAll('tr[data-key]')].some(r => r.textContent.includes('ci-bot'))`)
	b.shot(t, "keys")
	b.do(t, "leave", chromedp.Navigate(stack.URL+"/#/usage"))
	b.until(t, "the usage page", `document.querySelector('#page h1')?.textContent === 'Usage'`)
	b.do(t, "come back", chromedp.Navigate(stack.URL+"/#/keys"))
	b.until(t, "the keys listed again", `[...document.querySelectorAll('tr[data-key]')].some(r => r.textContent.includes('ci-bot'))`)
	if eval[bool](t, b, `document.body.textContent.includes(`+jsString(secret)+`)`) {
		t.Errorf("the key's secret is shown again")
	}
	b.do(t, "revoke it", chromedp.Click(chromedp.CSS("button[aria-label='Revoke ci-bot']")))
	b.until(t, "revoked", `[...document.querySelectorAll('tr[data-key]')].some(r => r.textContent.includes('ci-bot') && r.textContent.includes('revoked'))`)

	// An artifact: uploaded straight to object storage, fetched through a
	// signed link.
	content := []byte("console artifact " + time.Now().Format(time.RFC3339Nano) + "\n")
	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, content, 0o644); err != nil {
		t.Fatal(err)
	}
	b.do(t, "artifacts page", chromedp.Navigate(stack.URL+"/#/artifacts"), chromedp.WaitVisible(chromedp.CSS("details.panel summary")))
	b.do(t, "upload",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.SetUploadFiles(chromedp.CSS("input[type=file]"), []string{file}),
		chromedp.SendKeys(chromedp.CSS("form[aria-label='Upload an artifact'] input[name=labels]"), "kind=notes"),
		submit("form[aria-label='Upload an artifact']"))
	b.until(t, "uploaded", `document.body.textContent.includes('Uploaded notes.txt') || !!document.querySelector('#artifact-result .error')`)
	if msg := eval[string](t, b, `document.querySelector('#artifact-result .error')?.textContent || ''`); msg != "" {
		t.Fatalf("upload failed: %s", msg)
	}
	// The organization's artifacts include the logs its nodes kept of
	// ended environments: link the one uploaded here.
	row := `[...document.querySelectorAll('tr[data-artifact]')].find((r) => r.textContent.includes('notes.txt'))`
	b.until(t, "listed", `!!`+row)
	id := eval[string](t, b, row+`.dataset.artifact`)
	b.do(t, "create a link", submit(`tr[data-artifact="`+id+`"] form`))
	b.until(t, "the link", `!!document.querySelector('#artifact-link .link-url')`)
	b.shot(t, "artifacts")
	link := eval[string](t, b, `document.querySelector('#artifact-link .link-url').textContent`)
	if href := eval[string](t, b, `document.querySelector('#artifact-link a[download]').href`); href != link {
		t.Errorf("download link %q, shown %q", href, link)
	}
	res, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(got, content) {
		t.Errorf("through the link: %d %q, want %q", res.StatusCode, got, content)
	}
	// The browser can fetch it too (object storage allows the console).
	if s := eval[string](t, b, `fetch(`+jsString(link)+`).then(r => r.text())`); s != string(content) {
		t.Errorf("the browser fetched %q through the link", s)
	}

	b.do(t, "usage page", chromedp.Navigate(stack.URL+"/#/usage"))
	b.until(t, "the chart", `!!document.querySelector('svg.chart rect[fill^="url(#pat-"]')`)
	b.shot(t, "usage")
	b.do(t, "templates page", chromedp.Navigate(stack.URL+"/#/templates"))
	b.until(t, "the quotas", `document.querySelectorAll('article.card meter').length >= 2`)
	b.shot(t, "templates")
	b.do(t, "sandboxes page", chromedp.Navigate(stack.URL+"/#/sandboxes"))
	b.until(t, "the sandboxes", `document.querySelector('#page h1')?.textContent === 'Sandboxes' && !document.body.textContent.includes('Loading…')`)
	b.shot(t, "sandboxes")

	// A phone-width view of the list.
	b.do(t, "narrow", chromedp.EmulateViewport(390, 844), chromedp.Navigate(stack.URL+"/#/environments"))
	b.until(t, "the list at phone width", `!!document.querySelector('#env-list tr[data-id]')`)
	b.shot(t, "environments-phone")
	b.do(t, "wide again", chromedp.EmulateViewport(1280, 900))

	b.do(t, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token') || ''`); s != "" {
		t.Errorf("the token is still kept after sign-out")
	}

	// A link with a token: the page asks whose account, then signs in; the
	// token is gone from the address at once.
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.until(t, "signed in as bob", `document.querySelector('#who').textContent.includes('bob')`)
	if href := eval[string](t, b, `location.href + ' ' + history.length`); strings.Contains(href, "token") {
		t.Errorf("the token stays in the address: %s", href)
	}
}

// submit presses the form's submit button, as a person would; the form's
// own submit() would skip the page's handler.
func submit(form string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(form + " button[type=submit]"))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
