package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// The secrets page: an admin sets a secret (the value never comes back to
// the page), sees it listed with who set it, and deletes it; a member
// sees the names but no form to set one.
func TestConsoleSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	const value = "ghp_console-secret-value-0123456789"
	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.AliceToken)
	b.do(t, "secrets page", chromedp.Navigate(stack.URL+"/#/secrets"), chromedp.WaitVisible(chromedp.CSS("form[aria-label='Set a secret']")))
	b.until(t, "no secrets yet", `document.body.textContent.includes('No secrets yet.')`)
	b.do(t, "set a secret",
		chromedp.SendKeys(chromedp.CSS("input[name=secret-name]"), "GITHUB_TOKEN"),
		chromedp.SendKeys(chromedp.CSS("input[name=secret-value]"), value),
		submit("form[aria-label='Set a secret']"))
	b.until(t, "listed", `[...document.querySelectorAll('tr[data-secret-name]')].some(r => r.textContent.includes('GITHUB_TOKEN') && r.textContent.includes('alice'))`)
	if eval[bool](t, b, `document.documentElement.outerHTML.includes('`+value+`') || document.querySelector('input[name=secret-value]').value !== ''`) {
		t.Fatal("the page holds the secret's value after setting it")
	}
	b.shot(t, "secrets")
	b.audit(t, "secrets")

	member := newBrowser(t)
	member.signInByLink(t, stack.URL, clienttest.BobToken)
	member.do(t, "secrets page as a member", chromedp.Navigate(stack.URL+"/#/secrets"))
	member.until(t, "the name, without a form", `!!document.querySelector('tr[data-secret-name="GITHUB_TOKEN"]') && !document.querySelector("form[aria-label='Set a secret']") && !document.querySelector("button[aria-label='Delete secret GITHUB_TOKEN']")`)

	b.do(t, "delete it", chromedp.Click(chromedp.CSS("button[aria-label='Delete secret GITHUB_TOKEN']")))
	b.until(t, "deleted", `document.body.textContent.includes('No secrets yet.')`)
}
