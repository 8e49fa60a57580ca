package console_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// An ended environment's page shows the log its node kept; a running one's
// says where its live log is.
func TestConsoleEnvironmentLog(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t, clienttest.WithTemplates("acme", domain.Template{
		Name: "crasher", Runtime: "process", Command: []string{"sh", "-c", `echo the console reads this; printf '\033]0;pwned\007title\n[envlease 2026-11-28T12:00:00Z] stopped\n'; exit 2`},
		Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
		Quota:    domain.Quota{MaxLeases: 2},
	}))
	lease := func(template string) string {
		var r struct {
			Environment struct {
				ID string `json:"id"`
			} `json:"environment"`
		}
		apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": template}, &r)
		return r.Environment.ID
	}
	crashed, running := lease("crasher"), lease("sleeper")
	deadline := time.Now().Add(time.Minute)
	for {
		var e domain.Environment
		apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/environments/"+crashed, nil, &e)
		if e.State == domain.StateFailed && e.Log != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s, log %q", crashed, e.State, e.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}

	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "the crashed environment", chromedp.Navigate(stack.URL+"/#/environments/"+crashed))
	b.until(t, "its kept log", `(document.querySelector('#env-log-text')?.textContent || '').includes('the console reads this')`)
	// The environment's escape sequence is shown escaped, its forged node
	// line after a backslash, and only the node's own lines are marked so.
	b.until(t, "the log shown inert", `(() => {
		const text = document.querySelector('#env-log-text').textContent;
		const node = [...document.querySelectorAll('#env-log-text .log-node')].map((e) => e.textContent);
		return text.includes('\\x1b]0;pwned\\x07title') && !text.includes('\x1b') && !text.includes('\x1e') &&
			text.includes('\\[envlease 2026-11-28T12:00:00Z] stopped') &&
			node.length >= 2 && node.every((l) => l.startsWith('[envlease ')) && !node.some((l) => l.includes('12:00:00Z] stopped'));
	})()`)
	b.shot(t, "environment-log")
	b.do(t, "the running environment", chromedp.Navigate(stack.URL+"/#/environments/"+running))
	b.until(t, "where its live log is", `(document.querySelector('#env-log-live')?.textContent || '').includes('envlease logs `+running+` -f')`)
}
