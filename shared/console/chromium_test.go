package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// chromium finds Debian's chromium, installing it when the tests run as root
// (the test machines can reach package registries but nothing else). The
// lock keeps parallel test processes from running apt-get at once.
func chromium(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err == nil {
		return chromiumPath
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the console's browser tests need Chromium at %s: install Debian's package with 'sudo apt-get install -y chromium'", chromiumPath)
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "envlease-chromium-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if _, err := os.Stat(chromiumPath); err == nil {
		return chromiumPath
	}
	t.Logf("installing chromium with apt-get (first run only)…")
	out, err := exec.Command("sh", "-c", "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium").CombinedOutput()
	if err != nil {
		t.Fatalf("the console's browser tests need Chromium at %s and 'apt-get install -y chromium' failed: %v\n%s", chromiumPath, err, tail(out))
	}
	return chromiumPath
}

func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

// browser is a headless Chromium with a fresh profile, closed when the test
// ends. Script exceptions and dialogs (an alert would mean injected markup
// ran) are collected for the test to fail on.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.fail("script exception at %s:%d: %s", d.URL, d.LineNumber+1, msg)
		case *page.EventJavascriptDialogOpening:
			b.fail("a %s dialog opened: %q", e.Type, e.Message)
			go chromedp.Do(ctx, dismissDialog) //nolint:errcheck
		}
	})
	if err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("listen to chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Errorf("browser: %s", e)
		}
	})
	return b
}

// dismissDialog answers an open alert, confirm or prompt with Cancel.
var dismissDialog chromedp.Action[chromedp.Void] = func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
	_, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
	return chromedp.Void{}, err
}

func (b *browser) fail(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, fmt.Sprintf(format, args...))
}

var (
	shotsOnce sync.Once
	shotsDir  string
)

// screenshotDir is where every run keeps its screenshots, so a failing run
// can be looked at: ENVLEASE_CONSOLE_SCREENSHOTS or a folder in the temp dir.
func screenshotDir(t *testing.T) string {
	shotsOnce.Do(func() {
		shotsDir = os.Getenv("ENVLEASE_CONSOLE_SCREENSHOTS")
		if shotsDir == "" {
			shotsDir = filepath.Join(os.TempDir(), "envlease-console-screenshots")
		}
		_ = os.MkdirAll(shotsDir, 0o755)
	})
	return shotsDir
}

func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(screenshotDir(t), name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", p)
}
