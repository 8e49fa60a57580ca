package console_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// responses records the X-Request-Id of every API answer the page gets, by
// method and path, so a test can hold the page's shown id against the one
// the service sent.
type responses struct {
	mu      sync.Mutex
	methods map[network.RequestID]string
	ids     map[string][]string // "POST /v1/environments 429" -> request ids
}

func (b *browser) recordResponses(t *testing.T) *responses {
	t.Helper()
	r := &responses{methods: map[network.RequestID]string{}, ids: map[string][]string{}}
	err := chromedp.Listen(b.ctx, func(ev any) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			r.methods[e.RequestID] = e.Request.Method
		case *network.EventResponseReceived:
			path := e.Response.URL
			if i := strings.Index(path, "/v1/"); i >= 0 {
				path = path[i:]
			}
			path, _, _ = strings.Cut(path, "?")
			for k, v := range e.Response.Headers {
				if strings.EqualFold(k, "X-Request-Id") {
					key := r.methods[e.RequestID] + " " + path + " " + strconv.FormatInt(e.Response.Status, 10)
					r.ids[key] = append(r.ids[key], v.(string))
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *responses) of(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids[key]...)
}

// A lease the template's quota refuses (429 quota) says which template is
// full, with the API's message and request id, and links to that template's
// live environments, which the link shows filtered.
func TestConsoleQuotaRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	// sleeper allows 3 at once: fill it.
	for i := 0; i < 3; i++ {
		apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "sleeper"}, nil)
	}
	b := newBrowser(t)
	rec := b.recordResponses(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.until(t, "the list", `document.querySelectorAll('#env-list tr[data-id]').length === 3`)
	b.do(t, "lease one more",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.WaitReady(chromedp.CSS("form[aria-label='Lease an environment'] select option[value='sleeper']")),
		chromedp.SetValue(chromedp.CSS("form[aria-label='Lease an environment'] select"), "sleeper"),
		submit("form[aria-label='Lease an environment']"))
	b.until(t, "the refusal", `!!document.querySelector('.error a[href*="template=sleeper"]')`)
	b.shot(t, "quota")
	msg := eval[string](t, b, `document.querySelector('.error').textContent`)
	if !strings.Contains(msg, `Template "sleeper" is at its quota`) {
		t.Errorf("the refusal does not name the template: %q", msg)
	}
	ids := rec.of("POST /v1/environments 429")
	if len(ids) != 1 {
		t.Fatalf("429 answers with request ids: %v", ids)
	}
	if shown := eval[string](t, b, `document.querySelector('.error .rid code')?.textContent || ''`); shown != ids[0] {
		t.Errorf("shown request id %q, the service sent %q", shown, ids[0])
	}
	if !strings.Contains(msg, "quota") || !strings.Contains(msg, "Error: ") {
		t.Errorf("the API's message is not shown: %q", msg)
	}
	b.do(t, "follow the link", chromedp.Click(chromedp.CSS(`.error a[href*="template=sleeper"]`)))
	b.until(t, "the template's environments", `document.querySelector('input[name=template]')?.value === 'sleeper' && document.querySelectorAll('#env-list tr[data-id]').length === 3`)
	if n := eval[int](t, b, `[...document.querySelectorAll('#env-list tr[data-id]')].filter(r => !r.textContent.includes('sleeper')).length`); n != 0 {
		t.Errorf("%d environments of other templates listed", n)
	}
}

// A token revoked while the tab is signed in: the next API call answers 401,
// and the tab goes back to sign-in with the API's message, the token gone
// from session storage.
func TestConsoleUnauthorized(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	var made struct {
		Token  string `json:"token"`
		APIKey struct {
			ID string `json:"id"`
		} `json:"apiKey"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/tokens", map[string]any{"name": "short-lived", "source": "console"}, &made)
	b := newBrowser(t)
	rec := b.recordResponses(t)
	b.signInByLink(t, stack.URL, made.Token)
	b.until(t, "signed in", `document.querySelector('#who').textContent.includes('bob') && !!document.querySelector('#env-list')`)
	apiCall(t, stack.URL, clienttest.BobToken, "DELETE", "/v1/keys/"+made.APIKey.ID, nil, nil)
	// The environments page refreshes by itself; a page change asks too.
	b.do(t, "go to templates", chromedp.Navigate(stack.URL+"/#/templates"))
	b.until(t, "back at sign-in", `!!document.querySelector('#signin-form').getClientRects().length`)
	// What a signed-in person sees is gone, not only marked hidden.
	if n := eval[int](t, b, `['#nav', '#signout'].filter(s => document.querySelector(s).getClientRects().length).length`); n != 0 {
		t.Errorf("%d of the navigation and sign-out are still on screen", n)
	}
	b.shot(t, "unauthorized")
	if s := eval[string](t, b, `sessionStorage.getItem('envlease.token') || ''`); s != "" {
		t.Errorf("the revoked token is still kept: %q", s)
	}
	if n := eval[int](t, b, `sessionStorage.length + localStorage.length`); n != 0 {
		t.Errorf("%d items left in storage", n)
	}
	notice := eval[string](t, b, `document.querySelector('#notice').textContent`)
	if !strings.Contains(notice, "Error: ") || !strings.Contains(notice, "Request id: ") {
		t.Errorf("the sign-in page does not say why: %q", notice)
	}
	var all []string
	rec.mu.Lock()
	for k, v := range rec.ids {
		if strings.HasSuffix(k, " 401") {
			all = append(all, v...)
		}
	}
	rec.mu.Unlock()
	shown := eval[string](t, b, `document.querySelector('#notice .rid code')?.textContent || ''`)
	found := false
	for _, id := range all {
		found = found || id == shown
	}
	if !found {
		t.Errorf("shown request id %q is none of the 401 answers' %v", shown, all)
	}
	// Nothing of the signed-in pages is left to see.
	if n := eval[int](t, b, `document.querySelector('#page').childElementCount`); n != 0 {
		t.Errorf("the page still shows %d elements after the 401", n)
	}
}
