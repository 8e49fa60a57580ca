//go:build linux

package process

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/buildcache"
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// A process's build cache is a folder of the node named by ENVLEASE_CACHE,
// its user's: each environment runs as a user of its own, and the next
// one of the organization's template finds, and may write, what the last
// one left; another organization's does not.
func TestBuildCacheOfProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("users of their own need root")
	}
	users, err := confine.NewUIDPool(confine.DefaultUIDRange)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "envs"), 0o711); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	cache, err := buildcache.Open(buildcache.Options{Dir: filepath.Join(dir, "caches"), Log: logger})
	if err != nil {
		t.Fatal(err)
	}
	rt := New(Config{Node: &confine.Node{Users: users, Namespaces: confine.ProbeNamespaces() == nil, Log: logger},
		WorkDir: dir, Address: "127.0.0.1", BuildCache: cache, Log: logger})
	run := func(id, org string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h, err := rt.Prepare(ctx, runtimes.Env{ID: id, Org: org, Template: domain.Template{
			Name: "build", BuildCache: true, Env: map[string]string{"MARK": id},
			Command: []string{"sh", "-c", `{ id -u; cat "$ENVLEASE_CACHE/log" 2>/dev/null; } > out; echo "$MARK" >> "$ENVLEASE_CACHE/log"`},
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Remove()
		if err := h.Start(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Done():
		case <-ctx.Done():
			t.Fatalf("%s did not end", id)
		}
		b, err := os.ReadFile(filepath.Join(h.Files().Root, "out"))
		if err != nil {
			t.Fatalf("%s: %v (%v)", id, err, h.Err())
		}
		return string(b)
	}
	if first := run("pc-one", "acme"); strings.Contains(first, "pc-") {
		t.Errorf("the first environment found %q in a new cache", first)
	}
	if second := run("pc-two", "acme"); !strings.HasSuffix(second, "pc-one\n") {
		t.Errorf("the second environment found %q, not what the first left", second)
	}
	if third := run("pc-three", "acme"); !strings.HasSuffix(third, "pc-one\npc-two\n") {
		t.Errorf("the third environment found %q: the second could not write the cache", third)
	}
	if other := run("pc-other", "globex"); strings.Contains(other, "pc-") {
		t.Errorf("another organization's environment found %q", other)
	}
}
