package console_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// The documentation's screenshots of the console are taken by the browser
// tests, of the data they seed, so that they show the console as it is:
// with ENVLEASE_CONSOLE_DOCS set (to anything but empty), docShot writes
// them into docs/console as well as the run's screenshot folder.
const (
	docsShotsEnv = "ENVLEASE_CONSOLE_DOCS"
	docsDir      = "../../docs"
	docsShotsDir = docsDir + "/console"
)

// docShots are the screenshots the documentation shows, by their names in
// docs/console (without .png). TestConsoleFits takes every one of them and
// fails when one is missing; TestDocsScreenshotsAreTaken holds the docs to
// this list.
var docShots = []string{
	"signin-confirm", "environments", "environment", "environment-paused", "environment-log", "templates", "usage",
	"artifacts", "keys", "sandboxes", "events", "environments-phone",
}

var (
	docShotsMu    sync.Mutex
	docShotsTaken = map[string]bool{}
)

// docShot keeps a screenshot the documentation shows.
func (b *browser) docShot(t *testing.T, name string) {
	t.Helper()
	if !slices.Contains(docShots, name) {
		t.Fatalf("docShot %q: not one of docShots", name)
	}
	docShotsMu.Lock()
	docShotsTaken[name] = true
	docShotsMu.Unlock()
	// The page moves the focus to its content on navigation, whose ring
	// a reader of the docs has no use for.
	_ = eval[bool](t, b, `(document.activeElement?.blur(), true)`)
	// What the window shows, as a person sees it on arriving; a whole
	// page (twenty keys, fifty events) would make megabytes of PNG. The
	// pages below the fold are checked by TestConsoleFits all the same.
	buf, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	dirs := []string{screenshotDir(t)}
	if os.Getenv(docsShotsEnv) != "" {
		dirs = append(dirs, docsShotsDir)
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			return
		}
		t.Logf("screenshot: %s", p)
	}
}

var docsShotRef = regexp.MustCompile(`\(console/([A-Za-z0-9._-]+)\.png\)`)

// checkDocShots fails the test unless every screenshot of docShots was
// taken.
func checkDocShots(t *testing.T) {
	t.Helper()
	docShotsMu.Lock()
	defer docShotsMu.Unlock()
	for _, n := range docShots {
		if !docShotsTaken[n] {
			t.Errorf("the screenshot %s for the docs was not taken", n)
		}
	}
}

// Every screenshot of the console the documentation shows is one the
// browser tests take (docShots), and docs/console holds no other, so none
// can go stale unseen.
func TestDocsScreenshotsAreTaken(t *testing.T) {
	taken := map[string]bool{}
	for _, n := range docShots {
		taken[n] = true
	}
	docs, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no documentation in %s: %v", docsDir, err)
	}
	shown := map[string]bool{}
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docsShotRef.FindAllStringSubmatch(string(b), -1) {
			shown[m[1]] = true
			if !taken[m[1]] {
				t.Errorf("%s shows console/%s.png, which no browser test takes (docShots)", filepath.Base(d), m[1])
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(docsShotsDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if filepath.Ext(name) != ".png" || !taken[name[:len(name)-len(".png")]] {
			t.Errorf("docs/console/%s is not a screenshot a browser test takes", name)
		}
	}
	for _, n := range docShots {
		if !shown[n] {
			t.Errorf("the browser tests take console/%s.png, which no page of docs/ shows", n)
		}
	}
}
