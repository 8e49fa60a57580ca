package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// The keys page creates a token with scopes and an expiry and lists them;
// an admin trusts a CI issuer there and removes it again.
func TestKeysPageScopesAndIssuers(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	b := newBrowser(t)
	b.do(t, "open the console", chromedp.Navigate(stack.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	b.do(t, "sign in", chromedp.SendKeys(chromedp.CSS("#token"), clienttest.AliceToken), submit("#signin-form"))
	b.do(t, "keys page", chromedp.Navigate(stack.URL+"/#/keys"), chromedp.WaitVisible(chromedp.CSS("form[aria-label='Create a key']")))

	b.do(t, "create a scoped, expiring token",
		chromedp.SendKeys(chromedp.CSS("input[name=name]"), "ci-read"),
		chromedp.SetValue(chromedp.CSS("select[name=expires]"), "1h"),
		chromedp.Click(chromedp.CSS("form[aria-label='Create a key'] #key-scope-environments-read")),
		submit("form[aria-label='Create a key']"))
	b.until(t, "the token shown", `(document.querySelector('[data-secret]')?.textContent || '').startsWith('els_cli_')`)
	b.until(t, "listed with its scope and expiry", `[...document.querySelectorAll('tr[data-key]')].some(r => r.textContent.includes('ci-read') && r.textContent.includes('environments:read') && r.textContent.includes('active until'))`)
	b.shot(t, "keys-scoped")

	b.until(t, "the issuers section", `!!document.querySelector("form[aria-label='Trust a CI issuer']")`)
	b.do(t, "trust an issuer",
		chromedp.SendKeys(chromedp.CSS("input[name=issuer-name]"), "github"),
		// The test stack lets issuers be on loopback; the default URL
		// (GitHub's) would not resolve here.
		chromedp.SetValue(chromedp.CSS("input[name=issuer-url]"), "http://127.0.0.1:9"),
		chromedp.SendKeys(chromedp.CSS("textarea[name=issuer-conditions]"), "repository=acme/app"),
		chromedp.Click(chromedp.CSS("form[aria-label='Trust a CI issuer'] #issuer-scope-environments-lease")),
		submit("form[aria-label='Trust a CI issuer']"))
	b.until(t, "the issuer listed", `[...document.querySelectorAll('tr[data-issuer]')].some(r => r.textContent.includes('github') && r.textContent.includes('repository=acme/app'))`)
	b.shot(t, "issuers")
	b.do(t, "remove it", chromedp.Click(chromedp.CSS("button[aria-label='Remove issuer github']")))
	b.until(t, "removed", `document.body.textContent.includes('No trusted issuers yet.')`)
}
