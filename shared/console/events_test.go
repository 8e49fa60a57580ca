package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// The events page lists what happened, a stop with its reason, and in live
// mode shows a stop that happens while it is open.
func TestConsoleEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	lease := func(name string) string {
		var r struct {
			Environment struct {
				ID string `json:"id"`
			} `json:"environment"`
		}
		apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "sleeper", "name": name}, &r)
		return r.Environment.ID
	}
	first := lease("ev-first")
	apiCall(t, stack.URL, clienttest.BobToken, "DELETE", "/v1/environments/"+first, nil, nil)

	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "events", chromedp.Navigate(stack.URL+"/#/events?type=environment."))
	row := func(id, typ string) string {
		return `document.querySelector('#events tr[data-type="` + typ + `"] a[href="#/environments/` + id + `"]')`
	}
	b.until(t, "the stop of the first environment", `!!`+row(first, "environment.stopped")+` || !!`+row(first, "environment.stopping"))
	reason := eval[string](t, b, `[...document.querySelectorAll('#events tr')].filter((tr) => tr.querySelector('a[href="#/environments/`+first+`"]') && tr.dataset.type.startsWith('environment.stop')).map((tr) => tr.querySelector('[data-field=reason]').textContent)[0]`)
	if reason != "reason=deleted" {
		t.Fatalf("the stop's reason shows %q", reason)
	}
	b.do(t, "live mode", chromedp.Click(chromedp.CSS("input[name=live]")))
	second := lease("ev-second")
	apiCall(t, stack.URL, clienttest.BobToken, "DELETE", "/v1/environments/"+second, nil, nil)
	b.until(t, "the second environment's events, live", `!!`+row(second, "environment.leased"))
	b.shot(t, "events")
}
