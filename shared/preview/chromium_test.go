package preview_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/preview"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// chromiumPath is Debian's chromium, which the console's browser tests
// install (go test ./shared/console/ -run Chromium installs it when run as
// root).
const chromiumPath = "/usr/bin/chromium"

func newChromium(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s: install Debian's chromium package to run the preview's browser test", chromiumPath)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute) // a hang guard, not a limit under test
	t.Cleanup(func() { cancelTime(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// In real Chromium, which resolves *.localhost to the loopback itself: a
// page served in an environment loads through its preview link and its
// WebSocket echoes; the link's token leaves the address bar; the cookie is
// bound to its own host, so another environment's preview never receives
// it; an expired, tampered or revoked link shows the refusal page; a public
// export opens without a token.
func TestPreviewInChromium(t *testing.T) {
	n := newNode(t)
	ctx := newChromium(t)
	hour := time.Now().Add(time.Hour)
	tokA := n.token(t, "web", hour, nil)
	tokB := n.token(t, "web", hour, func(c *ticket.Claims) {
		c.Env, c.Host, c.Targets, c.Preview = env2, n.hostOf("web", env2), []string{n.target2}, "pv_2"
	})
	linkB := "http://" + n.hostOf("web", env2) + ":" + n.port + "/page?" + preview.Param + "=" + tokB

	open := func(u string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
			t.Fatal(err)
		}
	}
	echoes := func(what string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("ws") !== null && document.getElementById("ws").textContent === "echo: hello"`))
		if err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v; the page says %q", what, err, text)
		}
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil || strings.Contains(loc, preview.Param) {
			t.Errorf("%s: the token is still in the address bar: %s (%v)", what, loc, err)
		}
	}
	refused := func(what, u string) {
		t.Helper()
		open(u)
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#envlease-preview-refused"))); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v; the page says %q, want the refusal page", what, err, text)
		}
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if strings.Contains(text, "served by the app") {
			t.Fatalf("%s: the app answered: %q", what, text)
		}
	}

	open(n.link("web", "/page", tokA))
	echoes("A through its link")
	open(linkB)
	echoes("B through its link")

	// Each host holds its own cookie only, host-only: A's token never goes
	// to B's host, nor B's to A's.
	for _, tc := range []struct{ host, tok string }{{n.host("web"), tokA}, {n.hostOf("web", env2), tokB}} {
		var cookies []*network.Cookie
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{"http://" + tc.host + ":" + n.port + "/"}})
			cookies = res.Cookies
			return err
		}))
		if err != nil {
			t.Fatal(err)
		}
		if len(cookies) != 1 || cookies[0].Name != preview.Cookie || cookies[0].Value != tc.tok || cookies[0].Domain != tc.host ||
			!cookies[0].HTTPOnly || cookies[0].SameSite != network.CookieSameSiteLax {
			t.Fatalf("cookies sent to %s: %+v, want its own host-only HttpOnly Lax cookie alone", tc.host, cookies)
		}
	}

	refused("an expired link", n.link("web", "/page", n.token(t, "web", time.Now().Add(-time.Hour), nil)))
	refused("a tampered link", n.link("web", "/page", tokA[:len(tokA)-2]+"xx"))
	refused("an export of the environment with another export's link", n.link("api", "/page", tokA))
	n.revoked.Store(true) // pv_1: A's preview
	refused("a revoked preview, by its cookie", n.link("web", "/page", ""))
	refused("a revoked preview, by its link", n.link("web", "/page", tokA))
	n.revoked.Store(false)

	open(n.link("open", "/page", ""))
	echoes("a public export without a token")
}
