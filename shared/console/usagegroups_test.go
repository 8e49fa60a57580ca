package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// The usage page groups by a grouping the organization records, shows the
// cost beside the time when it set rates, and lists its budgets with what
// is left; the page passes the audit with all of it on screen.
func TestConsoleUsageGroupsCostAndBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	apiCall(t, stack.URL, clienttest.AliceToken, "PUT", "/v1/usage/settings", map[string]any{
		"groupings": []string{"label:team"}, "currency": "EUR",
		"rates": map[string]any{"sleeper": []map[string]any{{"from": "2026-01-01", "perHour": 3.6}}},
	}, nil)
	apiCall(t, stack.URL, clienttest.AliceToken, "PUT", "/v1/budgets/red-monthly", map[string]any{
		"scope": "label:team=red", "period": "month", "cost": 100,
	}, nil)
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{
		"template": "sleeper", "labels": map[string]string{"team": "red"},
	}, nil)
	// Usage counts whole seconds: the page has a row for team red once the
	// environment has run one (within the lease's second it has none).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var u struct {
			Usage []struct {
				Group   string `json:"group"`
				Seconds int64  `json:"seconds"`
			} `json:"usage"`
		}
		apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/usage?by=label:team", nil, &u)
		if len(u.Usage) > 0 && u.Usage[0].Seconds > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no usage of team red's environment after a minute: %+v", u)
		}
	}

	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "usage", chromedp.Navigate(stack.URL+"/#/usage"))
	b.until(t, "the budgets table", `!!document.querySelector('#budgets table') && document.querySelector('#budgets').textContent.includes('red-monthly')`)
	b.until(t, "the label:team grouping offered", `[...document.querySelectorAll('select[name=by] option')].some(o => o.value === 'label:team')`)
	eval[bool](t, b, `(() => { document.querySelector('select[name=by]').value = 'label:team';
		document.querySelector('form[aria-label="Usage range"]').requestSubmit(); return true; })()`)
	b.until(t, "the grouped totals", `[...document.querySelectorAll('#usage th')].some(th => th.textContent === 'label:team')`)
	text := eval[string](t, b, `document.querySelector('#usage').textContent`)
	for _, want := range []string{"red", "Cost", "EUR"} {
		if !strings.Contains(text, want) {
			t.Errorf("the grouped page lacks %q: %s", want, text)
		}
	}
	if got := eval[string](t, b, `document.querySelector('#budgets').textContent`); !strings.Contains(got, "label:team=red") || !strings.Contains(got, "100.00 EUR") {
		t.Errorf("budgets: %s", got)
	}
	b.audit(t, "usage-grouped")
}
