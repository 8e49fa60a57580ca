package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// nap pauses its environments after 3 s without use (short, for the test),
// and runs one at a time, so a second lease fills its running quota.
var nap = domain.Template{
	Name: "nap", Runtime: domain.RuntimeProcess, Command: []string{"sleep", "3600"},
	Timeouts: domain.Timeouts{Idle: domain.Duration(3 * time.Second), Hard: domain.Duration(time.Hour)},
	Idle:     &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 1, MaxPaused: 2},
}

// pauseIdle runs the timeout job until the environment, once past its idle
// timeout with nothing using it, is paused and its node has let it go.
func pauseIdle(t *testing.T, stack *clienttest.Stack, c *client.Client, id string) domain.Environment {
	t.Helper()
	return stack.UntilPaused(t, c, id, wait)
}

// A paused environment in the console: the list shows it beside the live
// ones, kept until when; its page says it is paused, why, until when and
// its checkpoint, and Wake wakes it. A wake the running quota refuses shows
// the error box; once a slot is free, Wake makes it pending again and the
// page follows it to ready. Keyboard only, audited, and it fits at 1280 px
// and at a phone's width.
func TestConsolePausedEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t, clienttest.WithTemplates("acme", nap))
	ctx := context.Background()
	alice, err := client.New(stack.URL, clienttest.AliceToken)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := alice.Lease(ctx, client.LeaseRequest{Template: "nap", Name: "napper"})
	if err != nil {
		t.Fatal(err)
	}
	id := leased.Environment.ID
	if _, err := alice.WaitReady(ctx, id, wait); err != nil {
		t.Fatal(err)
	}
	paused := pauseIdle(t, stack, alice, id)
	if paused.StopReason != domain.StopIdle || paused.RetainUntil == nil || paused.Checkpoint == nil {
		t.Fatalf("paused: %+v", paused)
	}
	// Another lease takes the template's one running slot: a wake is
	// refused with 429 quota until it ends.
	other, err := alice.Lease(ctx, client.LeaseRequest{Template: "nap", Name: "awake"})
	if err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.do(t, "open a sign-in link", chromedp.Navigate(stack.URL+"/#token="+clienttest.AliceToken))
	b.until(t, "the sign-in question", `!document.querySelector('#confirm').hidden`)
	b.do(t, "confirm the sign-in", chromedp.Click(chromedp.CSS("#confirm-signin")))
	b.until(t, "signed in", `!!sessionStorage.getItem('envlease.token') && !document.querySelector('#nav').hidden`)

	// The list: paused beside the live one, kept until when.
	row := `document.querySelector('#env-list tr[data-id="` + id + `"]')`
	b.do(t, "environments", chromedp.Navigate(stack.URL+"/#/environments"))
	b.until(t, "the paused one listed", `!!`+row+` && !!document.querySelector('#env-list tr[data-id="`+other.Environment.ID+`"]')`)
	if got := eval[string](t, b, row+`.querySelector('.state').textContent`); got != "paused" {
		t.Errorf("listed as %q, want paused", got)
	}
	if got := eval[string](t, b, row+`.querySelector('td[data-label="Idle in"]').textContent`); !strings.HasPrefix(got, "kept until ") {
		t.Errorf("its Idle in cell says %q, want kept until …", got)
	}
	b.audit(t, "environments-paused")
	b.fits(t, "environments-paused", 1280)

	// Its page: paused, why, until when, its checkpoint, Wake.
	b.do(t, "its page", chromedp.Navigate(stack.URL+"/#/environments/"+id))
	b.until(t, "drawn paused", `!!document.querySelector('#env-detail [data-state="paused"]') && !!document.querySelector('#wake')`)
	text := eval[string](t, b, `document.querySelector('#env-detail').innerText`)
	for _, want := range []string{"because it was idle", "until", "Kept until", "Checkpoint", "sealed", paused.Snapshot} {
		if !strings.Contains(text, want) {
			t.Errorf("the paused page does not say %q:\n%s", want, text)
		}
	}
	b.audit(t, "environment-paused")
	b.fits(t, "environment-paused", 1280)
	b.shot(t, "paused-page")
	b.focusOn(t, "#main")
	reached(t, "environment-paused", b.tabThrough(t, 15), "button Wake", "button Delete")

	// Refused: the running quota is full. The error box says so.
	b.focusOn(t, "#wake")
	b.key(t, kb.Enter)
	b.until(t, "the quota error", `!!document.querySelector('[role=status] .error .rid code')`)
	if msg := eval[string](t, b, `document.querySelector('[role=status] .error').innerText`); !strings.Contains(msg, "nap") {
		t.Errorf("the quota error does not name the template: %q", msg)
	}
	b.audit(t, "environment-wake-refused")
	// The page is drawn anew every 2 s; the focus stays on Wake, to try again.
	eval[bool](t, b, `(window.refusedWake = document.querySelector('#wake'), true)`)
	b.until(t, "a refresh", `!!document.querySelector('#wake') && document.querySelector('#wake') !== window.refusedWake`)
	if f := eval[focus](t, b, focusedJS); f.What != "button Wake" || !f.Ring {
		t.Errorf("after a refused wake and a refresh the focus is on %s (ring %v), want Wake", f.What, f.Ring)
	}
	if state := eval[string](t, b, `document.querySelector('#env-detail [data-state]').dataset.state`); state != "paused" {
		t.Errorf("after a refused wake it shows %s", state)
	}

	// A slot frees: Wake makes it pending, and the page follows it to ready.
	if _, err := alice.DeleteEnvironment(ctx, other.Environment.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.WaitChange(ctx, other.Environment.ID, domain.StateStopping, wait); err != nil {
		t.Fatal(err)
	}
	b.do(t, "phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.until(t, "drawn at phone width", `!!document.querySelector('#wake')`)
	b.fits(t, "environment-paused", 390)
	b.do(t, "the list at phone width", chromedp.Navigate(stack.URL+"/#/environments"))
	b.until(t, "listed at phone width", `!!`+row)
	b.fits(t, "environments-paused", 390)
	b.do(t, "back to its page", chromedp.Navigate(stack.URL+"/#/environments/"+id))
	b.until(t, "drawn paused again", `!!document.querySelector('#wake')`)
	// Every state the wake's status says, in order, as the page refreshes.
	eval[bool](t, b, `(() => { window.wakeStates = []; new MutationObserver(() => {
		const s = document.querySelector('#wake-status')?.dataset.state;
		if (s && window.wakeStates.at(-1) !== s) window.wakeStates.push(s);
	}).observe(document.querySelector('main'), { childList: true, subtree: true }); return true; })()`)
	b.focusOn(t, "#wake")
	b.key(t, kb.Enter)
	b.until(t, "waking", `['pending','starting','ready'].includes(document.querySelector('#wake-status')?.dataset.state)`)
	if f := eval[focus](t, b, focusedJS); !strings.HasPrefix(f.What, "p Waking") && !strings.HasPrefix(f.What, "p Awake") {
		t.Errorf("after Wake the focus is on %s, want the wake's status", f.What)
	}
	b.until(t, "awake", `document.querySelector('#wake-status')?.dataset.state === 'ready' && !!document.querySelector('#env-detail [data-state="ready"]') && !!document.querySelector('#touch')`)
	if states := eval[[]string](t, b, `window.wakeStates`); len(states) < 2 || states[0] != "pending" || states[len(states)-1] != "ready" {
		t.Errorf("the page followed the wake through %q, want pending first and ready last", states)
	}
	b.audit(t, "environment-woken")
	b.fits(t, "environment-woken", 390)
	b.do(t, "wide again", chromedp.EmulateViewport(1280, 900))
	b.shot(t, "paused-woken")
	woke, err := alice.GetEnvironment(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if woke.State != domain.StateReady || woke.Resumed == nil {
		t.Errorf("woken: %s, resumed %v", woke.State, woke.Resumed)
	}
}
