package buildcache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clock is a test clock that moves a second each time it is read.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func me() Owner { return Owner{UID: os.Geteuid(), GID: os.Getegid()} }

func open(t *testing.T, dir string, max int64) *Cache {
	t.Helper()
	c := &clock{t: time.Unix(1e9, 0)}
	cache, err := Open(Options{Dir: dir, MaxBytes: max, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return cache
}

func write(t *testing.T, l *Lease, name string, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(l.Path(), name), make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func has(l *Lease, name string) bool {
	_, err := os.Stat(filepath.Join(l.Path(), name))
	return err == nil
}

// A cache is kept for the same organization and template, never handed to
// another organization or template.
func TestCheckoutKeys(t *testing.T) {
	c := open(t, t.TempDir(), 1<<30)
	first, err := c.Checkout("acme", "build", me())
	if err != nil {
		t.Fatal(err)
	}
	write(t, first, "kept", 10)
	first.Release()
	for _, tc := range []struct {
		org, template string
		sees          bool
	}{
		{"acme", "build", true},
		{"globex", "build", false},
		{"acme", "other", false},
		{"acme\x00build", "", false},
	} {
		l, err := c.Checkout(tc.org, tc.template, me())
		if tc.template == "" {
			if err == nil {
				t.Errorf("%q/%q: a checkout without a template", tc.org, tc.template)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := has(l, "kept"); got != tc.sees {
			t.Errorf("%s/%s sees the file: %v, want %v", tc.org, tc.template, got, tc.sees)
		}
		l.Release()
	}
}

// Two environments of one organization's template at once get a slot each;
// the next one gets the slot released last.
func TestConcurrentCheckoutsGetSlotsOfTheirOwn(t *testing.T) {
	c := open(t, t.TempDir(), 1<<30)
	a, _ := c.Checkout("acme", "build", me())
	b, _ := c.Checkout("acme", "build", me())
	if a.Path() == b.Path() {
		t.Fatalf("two environments hold one slot: %s", a.Path())
	}
	write(t, a, "a", 1)
	write(t, b, "b", 1)
	a.Release()
	b.Release()
	next, _ := c.Checkout("acme", "build", me())
	if !has(next, "b") {
		t.Errorf("the next environment got %s, not the slot released last (%s)", next.Path(), b.Path())
	}
	next.Release()
}

// Past the bound, the least recently used slots no environment holds are
// removed; one in use never is, and a reopened cache keeps what was there.
func TestEvictionLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 100<<10)
	old, _ := c.Checkout("acme", "old", me())
	write(t, old, "f", 60<<10)
	old.Release()
	held, _ := c.Checkout("acme", "held", me())
	write(t, held, "f", 60<<10)
	recent, _ := c.Checkout("acme", "recent", me())
	write(t, recent, "f", 30<<10)
	// Only once held is given back and measured are the slots past the
	// bound: old, released first, goes.
	recent.Release()
	held.Release()
	if _, err := os.Stat(old.Path()); !os.IsNotExist(err) {
		t.Errorf("the least recently used slot is left: %v", err)
	}
	for _, l := range []*Lease{held, recent} {
		if !has(l, "f") {
			t.Errorf("%s was evicted", l.Path())
		}
	}
	if got := c.Bytes(); got > 100<<10 {
		t.Errorf("the caches hold %d bytes, past the bound", got)
	}

	// An agent started again finds the caches as they were.
	c2 := open(t, dir, 100<<10)
	l, _ := c2.Checkout("acme", "recent", me())
	if !has(l, "f") {
		t.Errorf("a reopened cache lost the slot of acme/recent")
	}
	l2, _ := c2.Checkout("acme", "other", me())
	if l2.Path() == l.Path() {
		t.Errorf("a new slot took an existing one's folder")
	}
}
