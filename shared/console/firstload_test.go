package console_test

import (
	"testing"

	"github.com/envlease/envlease/shared/clienttest"
)

// firstLoadBudget is what the first load may transfer, compressed.
const firstLoadBudget = 200 << 10

// The first load of a fresh browser, signed in through the fragment, up to
// the environments list drawn: what it transfers and how long it took are
// logged as figures. The bytes are held to the console's budget, 200 KB
// compressed; the time is never asserted (the machine's load is not the
// console's).
func TestConsoleFirstLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "sleeper"}, nil)
	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.until(t, "the list drawn", `!!document.querySelector('#env-list tr[data-id]') && !!(window.__drawn = window.__drawn || performance.now())`)
	type figures struct {
		Drawn    float64 `json:"drawn"`
		Transfer float64 `json:"transfer"`
		Decoded  float64 `json:"decoded"`
		Files    int     `json:"files"`
	}
	f := eval[figures](t, b, `(() => {
		const es = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
		return { drawn: window.__drawn, files: es.length,
			transfer: es.reduce((s, e) => s + e.transferSize, 0),
			decoded: es.reduce((s, e) => s + e.decodedBodySize, 0) };
	})()`)
	t.Logf("first load: %d requests, %.1f KB transferred (%.1f KB decoded), environments drawn %.0f ms after navigation start",
		f.Files, f.Transfer/1024, f.Decoded/1024, f.Drawn)
	if f.Files < 3 || f.Transfer <= 0 {
		t.Fatalf("the figures measured nothing: %+v", f)
	}
	if f.Transfer > firstLoadBudget {
		t.Errorf("the first load transferred %.1f KB, over the %d KB budget", f.Transfer/1024, firstLoadBudget/1024)
	}
}
