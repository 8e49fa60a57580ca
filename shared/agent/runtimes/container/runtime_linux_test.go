//go:build linux

package container

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/envlease/envlease/shared/agent/buildcache"
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/devstack/debian"
	"github.com/envlease/envlease/shared/domain"
)

var busybox struct {
	once      sync.Once
	runc, ref string
	err       error
}

// setup gives runc and a busybox image (Debian's busybox-static) served by
// a registry in the test process. Containers need root; they never skip on
// CI, where the tests run as root.
func setup(t *testing.T) (runc, ref string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containers need root")
	}
	busybox.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if busybox.runc, busybox.err = devstack.RuncBinary(ctx, os.Stderr); busybox.err != nil {
			return
		}
		img, err := debian.BusyboxImage(ctx)
		if err != nil {
			busybox.err = err
			return
		}
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		busybox.ref = strings.TrimPrefix(srv.URL, "http://") + "/tools/busybox:1"
		r, _ := name.ParseReference(busybox.ref)
		busybox.err = remote.Write(r, img)
	})
	if busybox.err != nil {
		t.Fatalf("runc and the busybox image: %v", busybox.err)
	}
	return busybox.runc, busybox.ref
}

// newRuntime is a container runtime of a node of its own in a temporary
// work dir, with build caches bounded to cacheBytes.
func newRuntime(t *testing.T, cacheBytes int64) *Runtime {
	t.Helper()
	runc, _ := setup(t)
	if err := confine.ProbeNamespaces(); err != nil {
		t.Fatalf("namespaces: %v", err)
	}
	users, err := confine.NewUIDPool(confine.DefaultUIDRange)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Containers' users reach their root filesystem and build cache
	// through the work dir (the agent makes it so: searchableByOthers).
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	logger := slog.New(slog.DiscardHandler)
	cache, err := buildcache.Open(buildcache.Options{Dir: filepath.Join(dir, "caches"), MaxBytes: cacheBytes, Log: logger})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{
		Node: &confine.Node{Users: users, Namespaces: true, Log: logger}, WorkDir: dir, Runc: runc,
		UIDs: confine.DefaultUIDRange, BuildCache: cache, Log: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs one environment of org's template to its end and gives what it
// wrote to /work/out.
func run(t *testing.T, r *Runtime, id, org string, tpl domain.Template) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := r.Prepare(ctx, runtimes.Env{ID: id, Template: tpl, Org: org})
	if err != nil {
		t.Fatalf("prepare %s: %v", id, err)
	}
	defer h.Remove()
	if err := h.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	select {
	case <-h.Done():
	case <-ctx.Done():
		t.Fatalf("%s did not end", id)
	}
	b, err := os.ReadFile(filepath.Join(h.Files().Root, "work", "out"))
	if err != nil {
		t.Fatalf("%s wrote nothing (%v): %v", id, h.Err(), err)
	}
	return string(b)
}

// cacheTemplate reads what the environments before it left in the build
// cache, then adds mark as a line and a file of pad KiB.
func cacheTemplate(ref, mark string, pad int) domain.Template {
	return domain.Template{
		Name: "build", Runtime: domain.RuntimeContainer, Image: &domain.Image{Ref: ref}, BuildCache: true, Workdir: "/work",
		Env: map[string]string{"MARK": mark},
		Command: []string{"sh", "-c", `{ echo "cache=$ENVLEASE_CACHE uid=$(id -u)"; cat /cache/log 2>/dev/null; } > /work/out
echo "$MARK" >> /cache/log
dd if=/dev/zero of=/cache/pad-$MARK bs=1024 count=` + strconv.Itoa(pad) + ` 2>/dev/null`},
	}
}

// A build cache is kept across an organization's environments of a
// template, in a folder writable with a read-only root, and never shown to
// another organization's environment of a template of the same name.
func TestBuildCacheKeptPerOrganization(t *testing.T) {
	_, ref := setup(t)
	r := newRuntime(t, 1<<30)
	first := run(t, r, "bc-one", "acme", cacheTemplate(ref, "bc-one", 0))
	if !strings.HasPrefix(first, "cache=/cache uid=0\n") || strings.Contains(first, "bc-") {
		t.Fatalf("the first environment found %q, want an empty cache at /cache", first)
	}
	if got := run(t, r, "bc-two", "acme", cacheTemplate(ref, "bc-two", 0)); !strings.Contains(got, "bc-one\n") {
		t.Errorf("the second environment of acme's template found %q, not what the first left", got)
	}
	if got := run(t, r, "bc-other", "globex", cacheTemplate(ref, "bc-other", 0)); strings.Contains(got, "bc-") {
		t.Errorf("another organization's environment found %q in its cache", got)
	}
}

// Past the bound, the build cache used least recently is evicted once no
// environment holds it.
func TestBuildCacheEvicted(t *testing.T) {
	_, ref := setup(t)
	r := newRuntime(t, 300<<10)
	run(t, r, "ev-acme", "acme", cacheTemplate(ref, "ev-acme", 200))
	// globex's cache, used last, pushes the caches past 300 KiB: acme's goes.
	run(t, r, "ev-globex", "globex", cacheTemplate(ref, "ev-globex", 200))
	if got := run(t, r, "ev-acme-again", "acme", cacheTemplate(ref, "ev-acme-again", 0)); strings.Contains(got, "ev-acme\n") {
		t.Errorf("acme's cache, least recently used, was kept past the bound: %q", got)
	}
	if got := run(t, r, "ev-globex-again", "globex", cacheTemplate(ref, "ev-globex-again", 0)); !strings.Contains(got, "ev-globex\n") {
		t.Errorf("globex's cache, used last, was evicted: %q", got)
	}
}
