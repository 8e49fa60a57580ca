//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/envfiles"
	"github.com/envlease/envlease/shared/execsession"
)

func (s *stack) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(s.url, apitest.BobToken)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs a shell script inside env and returns its output.
func (s *stack) run(t *testing.T, ctx context.Context, env, script string) string {
	t.Helper()
	argv := []string{"sh", "-c", script}
	x := s.execTicket(t, env, argv, false)
	var out, errs bytes.Buffer
	code, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: argv, Stdout: &out, Stderr: &errs})
	if err != nil || code != 0 {
		t.Fatalf("%s: exit %d, %v: %s", script, code, err, errs.String())
	}
	return out.String()
}

func fileReason(err error) string {
	var e *envfiles.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// checkFiles drives an environment's files through the whole stack (the
// API's ticket, the agent's endpoint, the runtime's root): what is written
// is what the environment reads, with its mode and as its user; paths that
// try to leave it (.., a link to a file of the node, /proc) are refused
// with their reason; a read ticket changes nothing; a watch sees the
// environment's own changes. readOnly is a path the environment may not
// write ("" for none).
func checkFiles(t *testing.T, s *stack, id string, container bool, readOnly string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	c := s.client(t)
	f := c.Files(id)
	mode := fs.FileMode(0o600)
	fi, err := f.Write(ctx, "hello.sh", strings.NewReader("echo hello from inside\n"), client.WriteOptions{Mode: &mode})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if fi.Mode != "0600" || fi.Size != 23 {
		t.Errorf("written: %+v", fi)
	}
	// The environment sees it, owned by its own user.
	if got := s.run(t, ctx, id, "sh hello.sh; [ \"$(stat -c %u hello.sh)\" = \"$(id -u)\" ] && echo mine"); got != "hello from inside\nmine\n" {
		t.Errorf("inside: %q", got)
	}
	// /tmp is the environment's own /tmp.
	if _, err := f.Write(ctx, "/tmp/from-outside", strings.NewReader("tmp"), client.WriteOptions{}); err != nil {
		t.Fatalf("write /tmp: %v", err)
	}
	if got := s.run(t, ctx, id, "cat /tmp/from-outside"); got != "tmp" {
		t.Errorf("/tmp inside: %q", got)
	}
	b, err := f.ReadFile(ctx, "hello.sh", 1<<20)
	if err != nil || string(b) != "echo hello from inside\n" {
		t.Errorf("read back: %q %v", b, err)
	}
	if _, err := f.Mkdir(ctx, "a/b", 0, true); err != nil {
		t.Fatalf("mkdir -p: %v", err)
	}
	if _, err := f.Write(ctx, "a/b/c.txt", strings.NewReader("c"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := f.List(ctx, "a/b")
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "c.txt" || l.Entries[0].Mode != "0644" {
		t.Errorf("list: %+v %v", l, err)
	}
	if err := f.Remove(ctx, "a", false); fileReason(err) != envfiles.ReasonNotEmpty {
		t.Errorf("remove a full folder: %v", err)
	}
	if err := f.Remove(ctx, "a", true); err != nil {
		t.Errorf("remove -r: %v", err)
	}
	if _, err := f.Stat(ctx, "a"); fileReason(err) != envfiles.ReasonNotFound {
		t.Errorf("stat of what was removed: %v", err)
	}

	// Paths that try to leave. The node's file is one the environment
	// cannot name but by a link to the node's path.
	secret := filepath.Join(t.TempDir(), "node-secret")
	if err := os.WriteFile(secret, []byte("the node's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.run(t, ctx, id, "ln -s "+secret+" out-abs && ln -s ../../../../../../../../"+strings.TrimPrefix(secret, "/")+" out-rel && ln -s /proc/self/root proc-root")
	for _, tc := range []struct{ path, want string }{
		{"../../etc/passwd", envfiles.ReasonOutsideRoot},
		{"/proc/self/environ", envfiles.ReasonSpecialPath},
		{"/proc/1/root/etc/passwd", envfiles.ReasonSpecialPath},
		{"out-abs", map[bool]string{false: envfiles.ReasonOutsideRoot, true: envfiles.ReasonNotFound}[container]},
		{"out-rel", map[bool]string{false: envfiles.ReasonOutsideRoot, true: envfiles.ReasonNotFound}[container]},
		{"proc-root/etc/passwd", map[bool]string{false: envfiles.ReasonOutsideRoot, true: envfiles.ReasonSpecialPath}[container]},
	} {
		b, err := f.ReadFile(ctx, tc.path, 1<<20)
		if strings.Contains(string(b), "the node's own") {
			t.Errorf("%s read the node's file", tc.path)
		}
		// A container's links resolve inside it: /proc there is refused
		// as it would be named directly, or not found.
		if got := fileReason(err); got != tc.want && !(container && got == envfiles.ReasonNotFound) {
			t.Errorf("read %s: %s (%v), want %s", tc.path, got, err, tc.want)
		}
	}
	if readOnly != "" {
		if _, err := f.Write(ctx, readOnly, strings.NewReader("x"), client.WriteOptions{}); fileReason(err) != envfiles.ReasonReadOnly {
			t.Errorf("write %s: %v, want read_only", readOnly, err)
		}
	}
	// A read ticket changes nothing.
	tk, err := c.CreateFilesTicket(ctx, id, client.FilesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := newPut(ctx, tk.URL+"/write?path=x", tk.Ticket)
	if res, err := httpDo(req); err != nil || res != 403 {
		t.Errorf("a write with a read ticket: %d %v", res, err)
	}

	// A watch sees the environment's own changes.
	changes := make(chan envfiles.FileChange, 64)
	wctx, stop := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		_ = f.Watch(wctx, ".", false, func(c envfiles.FileChange) error { changes <- c; return nil })
	}()
	await := func(op, name string) {
		t.Helper()
		for {
			select {
			case ch := <-changes:
				if ch.Op == op && (name == "" || strings.HasSuffix(ch.Path, "/"+name)) {
					return
				}
			case <-time.After(time.Minute):
				t.Fatalf("no %s of %s", op, name)
			}
		}
	}
	await(envfiles.OpWatching, "")
	s.run(t, ctx, id, "echo 1 > watched")
	await(envfiles.OpCreate, "watched")
	stop()
	watching.Wait()
}

// Files of a process environment, as its lent user.
func TestFilesProcess(t *testing.T) {
	s := newStack(t, domain.Template{Name: "box", Workdir: "/workspace", Command: []string{"sh", "-c", "exec sleep 3600"}})
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	s.runAgent(t, time.Second)
	id := s.lease(t, "box")
	s.wait(t, id, domain.StateReady)
	checkFiles(t, s, id, false, "")
}

// Files of a container: its absolute links mean its own root, and its
// root is read-only but for its writable paths.
func TestFilesContainer(t *testing.T) {
	ref := busyboxRef(t)
	s := newStack(t, domain.Template{Name: "box", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref},
		Command: []string{"sh", "-c", "exec sleep 3600"}, Workdir: "/work", Writable: []string{"/work"}})
	s.Clock.Set(time.Now())
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })
	id := s.lease(t, "box")
	s.waitLong(t, id, domain.StateReady)
	checkFiles(t, s, id, true, "/etc/envlease-was-here")
}

// fileHeapBound is how much the test process's heap (the agent's and the
// client's, both here) may grow while a GiB goes up and down: the bytes
// pass through fixed buffers, never held whole.
const fileHeapBound = 64 << 20

// A GiB up and back through the stack (client, the node's endpoint, the
// environment's disk) with the heap pinned: the agent and the client
// stream it, in both directions.
func TestFilesLargeFileInConstantMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a GiB each way")
	}
	const size = 1 << 30
	s := newStack(t, domain.Template{Name: "box", Command: []string{"sh", "-c", "exec sleep 3600"}})
	s.Clock.Set(time.Now())
	s.runAgent(t, time.Second)
	id := s.lease(t, "box")
	s.wait(t, id, domain.StateReady)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a hang guard
	defer cancel()
	f := s.client(t).Files(id)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			raise(&peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	up := sha256.New()
	fi, err := f.Write(ctx, "big", io.TeeReader(io.LimitReader(pattern{}, size), up), client.WriteOptions{})
	if err != nil || fi.Size != size {
		t.Fatalf("upload: %+v %v", fi, err)
	}
	rc, _, err := f.Open(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	down := sha256.New()
	n, err := io.Copy(down, rc)
	rc.Close()
	close(done)
	sampled.Wait()
	if err != nil || n != size || !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Fatalf("download: %d bytes, %v; same bytes: %v", n, err, bytes.Equal(up.Sum(nil), down.Sum(nil)))
	}
	if grew := int64(peak.Load()) - int64(base); grew > fileHeapBound {
		t.Errorf("the heap grew by %d MiB moving a GiB each way (bound %d MiB)", grew>>20, fileHeapBound>>20)
	} else {
		t.Logf("the heap grew by %d MiB at most moving a GiB each way", max(grew, 0)>>20)
	}
}

// pattern is an endless reader of bytes that do not compress to nothing.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return len(p), nil
}

func newPut(ctx context.Context, url, ticket string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader("x"))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+ticket)
	return req, nil
}

func httpDo(req *http.Request) (int, error) {
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}
