//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/image"
	"github.com/envlease/envlease/shared/agent/runc"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/devstack/debian"
	"github.com/envlease/envlease/shared/domain"
)

// busybox is a busybox image built once from Debian's busybox-static and
// served by a registry in the test process, as a reference.
var busybox struct {
	once sync.Once
	ref  string
	img  v1.Image
	err  error
}

// busyboxRef makes sure runc is there and gives the reference of the test
// image. Container tests need root; they never skip on CI, where the agent
// runs as root: a missing runc or busybox-static is installed.
func busyboxRef(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containers need the agent to run as root")
	}
	busybox.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if _, busybox.err = devstack.RuncBinary(ctx, os.Stderr); busybox.err != nil {
			return
		}
		if busybox.img, busybox.err = debian.BusyboxImage(ctx); busybox.err != nil {
			return
		}
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		// The registry lives as long as the test binary.
		busybox.ref = strings.TrimPrefix(srv.URL, "http://") + "/tools/busybox:1"
		r, _ := name.ParseReference(busybox.ref)
		busybox.err = remote.Write(r, busybox.img)
	})
	if busybox.err != nil {
		t.Fatalf("the container tests' busybox image: %v", busybox.err)
	}
	return busybox.ref
}

// waitLong waits for a state with a bound fit for a cold container on a
// busy machine (an image pull and unpack).
func (s *stack) waitLong(t *testing.T, id string, want domain.State) domain.Environment {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := s.Do("GET", "/v1/environments/"+id, apitest.BobToken, nil)
		var out domain.Environment
		r.JSON(t, &out)
		if out.State == want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s (%q), want %s", id, out.State, out.Error, want)
		}
		if want != domain.StateFailed && out.State == domain.StateFailed {
			t.Fatalf("%s failed: %s", id, out.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// containerState reads the state file the container runtime keeps of a
// running environment.
func containerState(t *testing.T, dir, id string) runc.State {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "containers", id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st runc.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// assertContainerGone checks that nothing of a container is left on the
// node: no process, mount, cgroup or folder.
func assertContainerGone(t *testing.T, dir string, st runc.State) {
	t.Helper()
	if st.Pid > 0 {
		if err := syscall.Kill(st.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d of %s still there: %v", st.Pid, st.ID, err)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), filepath.Join(dir, "containers", st.ID)) {
		t.Errorf("a mount of %s is left", st.ID)
	}
	for _, d := range st.Cgroups {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s left: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "containers", st.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("folder of %s left: %v", st.ID, err)
	}
}

// containerProbe serves /work/www on the export's port after probing what
// the container may write.
const containerProbe = `mkdir -p /work/www
if (echo x > /etc/probe) 2>/work/www/etc.err; then echo written > /work/www/etc; else cat /work/www/etc.err > /work/www/etc; fi
if echo kept > /data/f; then echo written > /work/www/data; fi
echo "hello from $(hostname)" > /work/www/index.html
echo "$PORT" > /work/www/port
exec httpd -f -p "$PORT" -h /work/www`

// A container template leased through the agent becomes ready from an
// image pulled from a registry; its export is reached through the tunnel;
// its root is read-only (EROFS) but for its writable paths and work
// folder; a delete leaves no process, mount, cgroup or folder of it.
func TestContainerLeaseReadyTunnelAndTeardown(t *testing.T) {
	ref := busyboxRef(t)
	s := newStack(t, domain.Template{
		Name: "box", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"sh", "-c", containerProbe},
		Workdir: "/work", Writable: []string{"/data"}, Exports: map[string]domain.Export{"web": {Port: 8080}},
	})
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	dir := s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.ReadyTimeout = time.Minute
	})
	id := s.lease(t, "box")
	env := s.waitLong(t, id, domain.StateReady)
	if len(env.Exports) != 1 {
		t.Fatalf("exports = %+v", env.Exports)
	}
	target := env.Exports[0].Target
	if got := s.getThroughTunnel(t, id, target, "/"); !strings.HasPrefix(got, "hello from ") {
		t.Errorf("index = %q", got)
	}
	if got := s.getThroughTunnel(t, id, target, "/etc"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("a write to /etc: %q, want EROFS", got)
	}
	if got := s.getThroughTunnel(t, id, target, "/data"); got != "written\n" {
		t.Errorf("a write to the writable /data: %q", got)
	}
	if got := s.getThroughTunnel(t, id, target, "/port"); got != "8080\n" {
		t.Errorf("PORT = %q", got)
	}
	st := containerState(t, dir, id)
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 && r.Status != 202 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	s.waitLong(t, id, domain.StateStopped)
	assertContainerGone(t, dir, st)
}

// A container that passes its memory limit ends failed, saying it ran out
// of memory; a fork bomb stays within its pids limit, the node answers,
// and its delete leaves nothing.
func TestContainerResourcesEnforced(t *testing.T) {
	ref := busyboxRef(t)
	// The shell's fork failures end its subshell; the sleeps it started
	// hold the limit but one slot, which the server forks into per request.
	bomb := `mkdir -p /work/www
httpd -p "$PORT" -h /work/www
(i=0; while [ $i -lt 200 ]; do sleep 600 & i=$((i+1)); done) 2>/work/www/forks
exec sleep 3600`
	s := newStack(t,
		domain.Template{Name: "hog", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"},
			Resources: domain.Resources{Memory: "16Mi"}},
		domain.Template{Name: "bomb", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"sh", "-c", bomb}, Workdir: "/work",
			Exports: map[string]domain.Export{"web": {Port: 8080}}, Resources: domain.Resources{PIDs: 16}},
	)
	s.Clock.Set(time.Now())
	dir := s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.ReadyTimeout = time.Minute
	})

	hog := s.lease(t, "hog")
	if env := s.waitLong(t, hog, domain.StateFailed); !strings.Contains(env.Error, "out of memory") || env.StopReason != domain.StopOutOfMemory {
		t.Errorf("over its memory limit: failed with %q (%s), want out of memory (out_of_memory)", env.Error, env.StopReason)
	}

	id := s.lease(t, "bomb")
	env := s.waitLong(t, id, domain.StateReady)
	target := env.Exports[0].Target
	// While the bomb still forks, the server's own fork for a request may
	// lose to it and the request fail: that is the limit at work, so look
	// again.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		got, err := s.tryGetThroughTunnel(t, id, target, "/forks")
		if err == nil && strings.Contains(got, "fork") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fork failed under a pids limit of 16: %q %v", got, err)
		}
	}
	st := containerState(t, dir, id)
	for _, cg := range st.Cgroups {
		if b, err := os.ReadFile(filepath.Join(cg, "pids.max")); err == nil && strings.TrimSpace(string(b)) != "16" {
			t.Errorf("%s/pids.max = %q", cg, b)
		}
		if b, err := os.ReadFile(filepath.Join(cg, "pids.current")); err == nil {
			if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n > 16 {
				t.Errorf("%s/pids.current = %d, above the limit", cg, n)
			}
		}
	}
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 && r.Status != 202 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	s.waitLong(t, id, domain.StateStopped)
	assertContainerGone(t, dir, st)
}

// An agent restarted after a crash removes the containers its earlier run
// left (processes, mounts, cgroups, folders), from their state files.
func TestRestartedAgentRemovesLeftoverContainers(t *testing.T) {
	ref := busyboxRef(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	// What a crashed agent leaves: a running container of the image.
	img, err := image.Puller{}.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := image.OpenCache(filepath.Join(t.TempDir(), "images"), image.CacheOptions{Apply: image.ApplyOptions{Owners: true}})
	if err != nil {
		t.Fatal(err)
	}
	rf, err := cache.Get(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Release()
	rc, err := runc.New(runc.Options{Dir: filepath.Join(dir, "containers")})
	if err != nil {
		t.Fatal(err)
	}
	const id = "env_fromacrash"
	ctr, err := rc.Create(ctx, rf.Dir, runc.Config{ID: id, Args: []string{"sh", "-c", "sleep 3600 & exec sleep 3600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Delete(context.Background(), id) })
	if err := rc.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	st := containerState(t, dir, id)

	s := newStack(t)
	s.runAgentWith(t, dir, time.Second, nil)
	select {
	case <-ctr.Done():
	case <-time.After(time.Minute):
		t.Fatal("the leftover container's process still runs")
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "containers", id)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leftover container's folder is still there")
		}
	}
	assertContainerGone(t, dir, st)
}

// dockerArchive is img as `docker save` writes it.
func dockerArchive(t *testing.T, img v1.Image) []byte {
	t.Helper()
	tag, _ := name.NewTag("tools/busybox:1")
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A container template whose image is an artifact runs from the archive
// the claim links to, with a share's files unpacked at its path in the
// container (relative to its work folder) before the command starts,
// owned by the container's user.
func TestContainerFromImageArtifactWithShare(t *testing.T) {
	busyboxRef(t)
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, domain.Template{
		Name: "sharer", Runtime: agent.RuntimeContainer, Image: &domain.Image{Artifact: "art_image"}, Workdir: "/work",
		Command: []string{"sh", "-c", `mkdir -p www; cat src/hello.txt > www/seen; stat -c %u src/hello.txt > www/owner; exec httpd -f -p "$PORT" -h www`},
		Shares:  []domain.TemplateShare{{Name: "src", Path: "src", Direction: "in"}},
		Exports: map[string]domain.Export{"web": {Port: 8080}},
		Quota:   domain.Quota{MaxLeases: 5},
	})
	snaps.store = s.Store
	snaps.add(t, "art_image", dockerArchive(t, busybox.img))
	snaps.add(t, "art_share", zst(t, tarOf(t, file("hello.txt", "hello")).Bytes()))
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })
	id := s.leaseShare(t, "art_share")
	env := s.waitLong(t, id, domain.StateReady)
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	target := env.Exports[0].Target
	if got := s.getThroughTunnel(t, id, target, "/seen"); got != "hello" {
		t.Errorf("the command saw %q in its share", got)
	}
	if got := s.getThroughTunnel(t, id, target, "/owner"); got != "0\n" {
		t.Errorf("the share's file is owned by %q inside, want the container's root", got)
	}
	// A second lease of the image downloads and unpacks nothing.
	s.Clock.Set(apitest.Start)
	second := s.leaseShare(t, "art_share")
	s.waitLong(t, second, domain.StateReady)
	snaps.mu.Lock()
	hits := snaps.hits["art_image"]
	snaps.mu.Unlock()
	if hits != 1 {
		t.Errorf("the image artifact was downloaded %d times for two leases", hits)
	}
}

// A template with warm containers keeps one created, started and ready; a
// lease takes it and is ready without a container of its own.
func TestWarmContainerIsHandedOver(t *testing.T) {
	ref := busyboxRef(t)
	s := newStack(t, domain.Template{
		Name: "warmbox", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Warm: 1, Workdir: "/work",
		Command: []string{"sh", "-c", `mkdir -p www; echo warm > www/index.html; exec httpd -f -p "$PORT" -h www`},
		Exports: map[string]domain.Export{"web": {Port: 8080}},
	})
	s.Clock.Set(time.Now())
	var logs logBuffer
	dir := s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.ReadyTimeout = time.Minute
		c.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	for deadline := time.Now().Add(2 * time.Minute); !logs.has(`"msg":"warm environment ready"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warm container became ready:\n%s", logs.String())
		}
	}
	id := s.lease(t, "warmbox")
	env := s.waitLong(t, id, domain.StateReady)
	if got := s.getThroughTunnel(t, id, env.Exports[0].Target, "/"); got != "warm\n" {
		t.Errorf("index = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "containers", id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lease made a container of its own (%v) rather than take the warm one", err)
	}
}

// logBuffer is an agent's log, read by a test while the agent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) has(s string) bool { return strings.Contains(b.String(), s) }

// A warm template whose image is an artifact keeps warm containers once a
// lease brought the archive: they start from the node's image cache, and
// the next lease takes one without downloading the image again.
func TestWarmContainerFromImageArtifact(t *testing.T) {
	busyboxRef(t)
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, domain.Template{
		Name: "warmart", Runtime: agent.RuntimeContainer, Image: &domain.Image{Artifact: "art_image"}, Warm: 1, Workdir: "/work",
		Command: []string{"sh", "-c", `mkdir -p www; echo warm > www/index.html; exec httpd -f -p "$PORT" -h www`},
		Exports: map[string]domain.Export{"web": {Port: 8080}},
		Quota:   domain.Quota{MaxLeases: 5},
	})
	snaps.store = s.Store
	snaps.add(t, "art_image", dockerArchive(t, busybox.img))
	var logs logBuffer
	dir := s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.ReadyTimeout = time.Minute
		c.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	// Before any lease the node cannot have the image: nothing warm.
	first := s.lease(t, "warmart")
	s.waitLong(t, first, domain.StateReady)
	for deadline := time.Now().Add(2 * time.Minute); !logs.has(`"msg":"warm environment ready"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warm container became ready after the image came:\n%s", logs.String())
		}
	}
	second := s.lease(t, "warmart")
	env := s.waitLong(t, second, domain.StateReady)
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	if got := s.getThroughTunnel(t, second, env.Exports[0].Target, "/"); got != "warm\n" {
		t.Errorf("index = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "containers", second)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the second lease made a container of its own (%v) rather than take the warm one", err)
	}
	snaps.mu.Lock()
	hits := snaps.hits["art_image"]
	snaps.mu.Unlock()
	if hits != 1 {
		t.Errorf("the image artifact was downloaded %d times", hits)
	}
}
