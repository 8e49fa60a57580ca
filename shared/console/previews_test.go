package console_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// A ready environment's page makes a preview link to its export, whose
// link opens the environment's page in the browser, and revokes it.
func TestConsolePreviewLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	var r struct {
		Environment struct {
			ID string `json:"id"`
		} `json:"environment"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "shell"}, &r)
	id := r.Environment.ID
	deadline := time.Now().Add(time.Minute)
	for {
		var e domain.Environment
		apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/environments/"+id, nil, &e)
		if e.State == domain.StateReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s", id, e.State)
		}
		time.Sleep(50 * time.Millisecond)
	}

	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "the environment", chromedp.Navigate(stack.URL+"/#/environments/"+id))
	// The panel draws itself again once its previews are read: wait for
	// that, then click in the page, so the click never lands on a button
	// the panel has just replaced.
	b.until(t, "the previews read", `(document.getElementById('env-previews')?.textContent || '').includes('No open preview links.')`)
	eval[bool](t, b, `(() => { document.querySelector('#env-previews button[data-make-preview]').click(); return true; })()`)
	b.until(t, "the link listed", `document.querySelector('#env-previews [data-preview] a[href*="envlease_preview="]') !== null`)
	b.shot(t, "environment-previews")
	link := eval[string](t, b, `document.querySelector('#env-previews [data-preview] a').href`)
	eval[bool](t, b, `(() => { document.querySelector('#env-previews [data-preview] button.danger').click(); return true; })()`)
	b.until(t, "the link gone", `document.querySelector('#env-previews [data-preview]') === null`)

	// The revoked link shows the node's refusal, once the node has heard.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		b.do(t, "open the revoked link", chromedp.Navigate(link))
		if eval[bool](t, b, `document.getElementById('envlease-preview-refused') !== null`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the revoked link still opens the environment")
		}
	}
}
