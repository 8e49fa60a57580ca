package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// signInByLink opens the console at /#token=<token>, as a link would, and
// answers the page's question with Sign in.
func (b *browser) signInByLink(t *testing.T, base, token string) {
	t.Helper()
	b.do(t, "open a sign-in link", chromedp.Navigate(base+"/#token="+token))
	b.until(t, "the sign-in question", `!document.querySelector('#confirm').hidden`)
	b.do(t, "confirm the sign-in", chromedp.Click(chromedp.CSS("#confirm-signin")))
	b.until(t, "signed in", `!!sessionStorage.getItem('envlease.token') && !document.querySelector('#nav').hidden`)
}

// askCode asks the API for a console sign-in code, as envlease console does.
func askCode(t *testing.T, base, token string) string {
	t.Helper()
	var c struct {
		Code string `json:"code"`
	}
	apiCall(t, base, token, "POST", "/v1/console/codes", map[string]any{}, &c)
	return c.Code
}

type keyRecord struct {
	ID      string     `json:"id"`
	Name    string     `json:"name"`
	Source  string     `json:"source"`
	Revoked *time.Time `json:"revoked"`
	Expires *time.Time `json:"expires"`
}

func listKeys(t *testing.T, base, token string) []keyRecord {
	t.Helper()
	var out struct {
		Keys []keyRecord `json:"keys"`
	}
	apiCall(t, base, token, "GET", "/v1/keys", nil, &out)
	return out.Keys
}

// waitRevoked waits until the key id is revoked (the page revokes without
// waiting for the answer).
func waitRevoked(t *testing.T, base, token, id string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		for _, k := range listKeys(t, base, token) {
			if k.ID == id && k.Revoked != nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s was not revoked", id)
		}
	}
}

// envlease console's way in: the page exchanges the code for a console token
// of its own, says whose account it is, and keeps the token only on Sign in.
// The code works once; Cancel and Sign out revoke the token the page got.
func TestConsoleSignInWithCode(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	b := newBrowser(t)
	code := askCode(t, stack.URL, clienttest.AliceToken)

	b.do(t, "open with a code", chromedp.Navigate(stack.URL+"/#code="+code))
	b.until(t, "the sign-in question", `!document.querySelector('#confirm').hidden`)
	if title := eval[string](t, b, `document.querySelector('#confirm-title').textContent`); title != "Sign in as alice of acme?" {
		t.Errorf("the question is %q", title)
	}
	who := eval[string](t, b, `document.querySelector('#confirm-who').textContent`)
	for _, want := range []string{"acme", "alice", "admin", "console sign-in"} {
		if !strings.Contains(who, want) {
			t.Errorf("the question's details %q lack %q", who, want)
		}
	}
	if s := eval[string](t, b, `(sessionStorage.getItem('envlease.token') || '') + location.href`); strings.Contains(s, "els_") || strings.Contains(s, code) {
		t.Errorf("before the answer, the tab keeps a token or the code: %q", s)
	}
	if eval[bool](t, b, `!document.querySelector('#nav').hidden`) {
		t.Errorf("the sections show before the answer")
	}
	b.shot(t, "signin-confirm")

	b.do(t, "sign in", chromedp.Click(chromedp.CSS("#confirm-signin")))
	b.until(t, "signed in as alice", `document.querySelector('#who').textContent.includes('alice') && !!document.querySelector('#env-list')`)
	token := eval[string](t, b, `sessionStorage.getItem('envlease.token')`)
	if !strings.HasPrefix(token, "els_cli_") || token == clienttest.AliceToken {
		t.Fatalf("the tab keeps %q, want a console token of its own", token)
	}
	minted := eval[string](t, b, `sessionStorage.getItem('envlease.minted')`)
	var found *keyRecord
	for _, k := range listKeys(t, stack.URL, clienttest.AliceToken) {
		if k.ID == minted {
			found = &k
		}
	}
	if found == nil || found.Source != "console" || found.Expires == nil || found.Revoked != nil {
		t.Fatalf("the console token's record: %+v", found)
	}

	// Used: the same code again is refused, in the API and in the page,
	// and the tab stays signed in as it was.
	res := postJSON(t, stack.URL+"/v1/console/sessions", `{"code":"`+code+`"}`)
	if res != http.StatusUnauthorized {
		t.Errorf("second exchange: %d", res)
	}
	b.do(t, "open with the used code", chromedp.Navigate(stack.URL+"/#code="+code))
	b.until(t, "the refusal", `(document.querySelector('#notice')?.textContent || '').includes('already used')`)
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token') + ' ' + document.querySelector('#who').textContent + ' ' + document.querySelector('#confirm').hidden`); s != token+" alice (admin) · acme true" {
		t.Errorf("after the refused code the tab is %q", s)
	}

	// Sign out revokes the console token: nothing else holds it.
	b.do(t, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	waitRevoked(t, stack.URL, clienttest.AliceToken, minted)

	// Cancel: nothing kept, and the token the exchange made is revoked.
	code = askCode(t, stack.URL, clienttest.BobToken)
	b.do(t, "open with another code", chromedp.Navigate(stack.URL+"/#code="+code))
	b.until(t, "the question for bob", `document.querySelector('#confirm-title').textContent === 'Sign in as bob of acme?' && !document.querySelector('#confirm').hidden`)
	var cancelled string
	for _, k := range listKeys(t, stack.URL, clienttest.BobToken) {
		if k.Name == "console sign-in" && k.Expires != nil && k.Revoked == nil {
			cancelled = k.ID
		}
	}
	b.do(t, "cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	b.until(t, "signed out", `!!document.querySelector('#signin-form').getClientRects().length && !sessionStorage.getItem('envlease.token')`)
	if cancelled == "" {
		t.Fatal("no console token was made for the second code")
	}
	waitRevoked(t, stack.URL, clienttest.BobToken, cancelled)
}

// A link with a token signs nobody in silently: the page says whose account
// it is and asks; Cancel leaves the tab as it was, signed out or in its own
// account; a bad token in a link does not sign the tab out.
func TestConsoleSignInLinkAsks(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	b := newBrowser(t)

	// Signed out: the link asks, and Cancel keeps the tab signed out.
	b.do(t, "open carol's link", chromedp.Navigate(stack.URL+"/#token="+clienttest.CarolToken))
	b.until(t, "the question", `!document.querySelector('#confirm').hidden`)
	if title := eval[string](t, b, `document.querySelector('#confirm-title').textContent`); title != "Sign in as carol of globex?" {
		t.Errorf("the question is %q", title)
	}
	if s := eval[string](t, b, `(sessionStorage.getItem('envlease.token') || '') + location.href`); strings.Contains(s, clienttest.CarolToken) {
		t.Errorf("before the answer the tab keeps the token, or the address shows it: %q", s)
	}
	b.do(t, "cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	b.until(t, "the sign-in form", `!!document.querySelector('#signin-form').getClientRects().length && document.querySelector('#confirm').hidden`)
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token') || ''`); s != "" {
		t.Errorf("after Cancel the tab keeps %q", s)
	}

	// Signed in as bob (pasted): carol's link asks, says the tab is bob's,
	// and Cancel keeps bob.
	b.do(t, "sign in as bob", chromedp.SendKeys(chromedp.CSS("#token"), clienttest.BobToken), submit("#signin-form"))
	b.until(t, "bob", `document.querySelector('#who').textContent.includes('bob') && !!document.querySelector('#env-list')`)
	b.do(t, "open carol's link again", chromedp.Navigate(stack.URL+"/#token="+clienttest.CarolToken))
	b.until(t, "the question", `!document.querySelector('#confirm').hidden`)
	if s := eval[string](t, b, `document.querySelector('#confirm-current').textContent`); !strings.Contains(s, "bob of acme") {
		t.Errorf("the question does not say the tab is bob's: %q", s)
	}
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token')`); s != clienttest.BobToken {
		t.Errorf("while asking, the tab keeps %q", s)
	}
	b.do(t, "cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	b.until(t, "bob again", `document.querySelector('#who').textContent.includes('bob') && !!document.querySelector('#env-list') && document.querySelector('#confirm').hidden`)
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token')`); s != clienttest.BobToken {
		t.Errorf("after Cancel the tab keeps %q", s)
	}

	// A link with a token that does not work: the tab stays bob's.
	b.do(t, "open a bad link", chromedp.Navigate(stack.URL+"/#token=els_cli_"+strings.Repeat("x", 43)))
	b.until(t, "the refusal", `(document.querySelector('#notice')?.textContent || '').includes('unknown token')`)
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token') + ' ' + document.querySelector('#who').textContent`); s != clienttest.BobToken+" bob (member) · acme" {
		t.Errorf("after a bad link the tab is %q", s)
	}

	// Sign in: now the tab is carol's.
	b.signInByLink(t, stack.URL, clienttest.CarolToken)
	b.until(t, "carol", `document.querySelector('#who').textContent.includes('carol') && document.querySelector('#who').textContent.includes('globex')`)
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token')`); s != clienttest.CarolToken {
		t.Errorf("after Sign in the tab keeps %q", s)
	}
}

// postJSON posts body without a token and returns the status.
func postJSON(t *testing.T, url, body string) int {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
