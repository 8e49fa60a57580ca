package runc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/runc/pinned"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/devstack/debian"
)

// lowerDir is a busybox root filesystem shared read-only by the tests'
// containers, as a cached image is.
var lowerDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "container tests run real containers and need root (mounts, cgroups, runc)")
		return 1
	}
	if _, err := devstack.RuncBinary(ctx, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "container tests need runc:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "container-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	lowerDir = filepath.Join(dir, "busybox")
	if err := debian.BusyboxRootfs(ctx, lowerDir); err != nil {
		fmt.Fprintln(os.Stderr, "container tests need Debian's busybox-static:", err)
		return 1
	}
	return m.Run()
}

var ids atomic.Int64

func newID(t testing.TB) string {
	return fmt.Sprintf("t%d-%d", os.Getpid(), ids.Add(1))
}

func newRuntime(t testing.TB, dir string) *Runtime {
	t.Helper()
	if dir == "" {
		// Traversable by the ids of a user namespace: runc binds the root
		// filesystem from inside one.
		dir = t.TempDir()
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		dir = filepath.Join(dir, "envs")
	}
	r, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ctx bounds a test's waits generously: a busy machine is slow, not stuck.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runToEnd creates and starts a container and waits for its process.
func runToEnd(t *testing.T, r *Runtime, c Config) (*Container, Exit) {
	t.Helper()
	return runImage(t, r, lowerDir, c)
}

// runImage is runToEnd with the root filesystem lower.
func runImage(t *testing.T, r *Runtime, lower string, c Config) (*Container, Exit) {
	t.Helper()
	ctx := testCtx(t)
	ctr, err := r.Create(ctx, lower, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), c.ID) })
	if err := r.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctr.Done():
	case <-ctx.Done():
		t.Fatalf("container %s did not end", c.ID)
	}
	return ctr, ctr.Exit()
}

func logOf(t *testing.T, ctr *Container, name string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(ctr.Dir, name))
	return string(b)
}

// assertGone checks that nothing of a container is left on the node.
func assertGone(t *testing.T, r *Runtime, st *State) {
	t.Helper()
	if st.Pid > 0 {
		if err := syscall.Kill(st.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still there: %v", st.Pid, err)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), " "+st.Rootfs+" ") || strings.Contains(string(mi), filepath.Join(r.opt.Dir, st.ID)+"/") {
		t.Errorf("a mount of %s is left", st.ID)
	}
	for _, d := range st.Cgroups {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s left: %v", d, err)
		}
	}
	if _, err := os.Stat(r.dir(st.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("folder of %s left: %v", st.ID, err)
	}
	if _, err := r.State(context.Background(), st.ID); err == nil {
		t.Errorf("runc still knows %s", st.ID)
	}
}

func TestRunExitCodeAndLogs(t *testing.T) {
	r := newRuntime(t, "")
	id := newID(t)
	ctr, exit := runToEnd(t, r, Config{ID: id, Args: []string{"sh", "-c", "echo out; echo err >&2; hostname; exit 7"}})
	if exit.Code != 7 || exit.Signal != 0 || exit.OOMKilled {
		t.Errorf("exit = %+v, want 7", exit)
	}
	if out := logOf(t, ctr, "stdout.log"); out != "out\n"+id+"\n" {
		t.Errorf("stdout = %q", out)
	}
	if e := logOf(t, ctr, "stderr.log"); e != "err\n" {
		t.Errorf("stderr = %q", e)
	}
	st, err := readState(ctr.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, st)
}

func TestMemoryLimitEnforced(t *testing.T) {
	r := newRuntime(t, "")
	// busybox dd allocates its block: 64 MiB against a 16 MiB limit.
	ctr, exit := runToEnd(t, r, Config{ID: newID(t), Resources: Resources{MemoryBytes: 16 << 20},
		Args: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"}})
	if !exit.OOMKilled || exit.Signal != syscall.SIGKILL {
		t.Fatalf("exit = %+v (%s), want killed for memory; stderr %q", exit, exit, logOf(t, ctr, "stderr.log"))
	}
	if !strings.Contains(exit.String(), "out of memory") {
		t.Errorf("exit says %q", exit)
	}
	// Within the limit the same command succeeds.
	_, exit = runToEnd(t, r, Config{ID: newID(t), Resources: Resources{MemoryBytes: 128 << 20},
		Args: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"}})
	if exit.Code != 0 || exit.OOMKilled {
		t.Fatalf("within the limit: exit = %+v", exit)
	}
}

func TestPidsLimitContainsForks(t *testing.T) {
	r := newRuntime(t, "")
	script := `i=0; while [ $i -lt 40 ]; do sleep 60 & i=$((i+1)); done; echo done`
	ctr, exit := runToEnd(t, r, Config{ID: newID(t), Resources: Resources{Pids: 8}, Args: []string{"sh", "-c", script}})
	if !strings.Contains(logOf(t, ctr, "stderr.log"), "fork") {
		t.Errorf("no fork failed under a pids limit of 8: exit %+v, stderr %q", exit, logOf(t, ctr, "stderr.log"))
	}
}

func TestReadOnlyRootWithWritablePaths(t *testing.T) {
	r := newRuntime(t, "")
	script := `echo kept > /data/sub/f || exit 3
if echo no > /etc/f; then exit 4; fi
if echo no > /f; then exit 5; fi
touch /scratch/x || exit 6
exit 0`
	ctr, exit := runToEnd(t, r, Config{ID: newID(t), ReadOnly: true, Writable: []string{"/data/sub"}, Tmpfs: []string{"/scratch"},
		Args: []string{"sh", "-c", script}})
	if exit.Code != 0 {
		t.Fatalf("exit = %+v, stderr %q", exit, logOf(t, ctr, "stderr.log"))
	}
	if e := logOf(t, ctr, "stderr.log"); strings.Count(e, "Read-only file system") != 2 {
		t.Errorf("stderr = %q, want two EROFS", e)
	}
	// What was written to a writable path is in the environment's upper
	// folder, not in the shared image.
	if b, err := os.ReadFile(filepath.Join(ctr.Dir, "upper/data/sub/f")); err != nil || string(b) != "kept\n" {
		t.Errorf("upper/data/sub/f = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(lowerDir, "data")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the image's root filesystem changed: %v", err)
	}
}

func TestWritablePathThroughAnImageLinkRefused(t *testing.T) {
	lower := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(lower, "data")); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, "")
	id := newID(t)
	_, err := r.Create(testCtx(t), lower, Config{ID: id, ReadOnly: true, Writable: []string{"/data"}, Args: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(r.dir(id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed create left its folder: %v", err)
	}
}

func TestKillAndDeleteLeaveNothing(t *testing.T) {
	r := newRuntime(t, "")
	ctx := testCtx(t)
	id := newID(t)
	ctr, err := r.Create(ctx, lowerDir, Config{ID: id, Resources: Resources{MemoryBytes: 64 << 20, Pids: 64},
		Args: []string{"sh", "-c", "sleep 1000 & sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.State(ctx, id); err != nil || s.Status != "created" {
		t.Fatalf("state %+v, %v", s, err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if s, err := r.State(ctx, id); err != nil || s.Status != "running" {
		t.Fatalf("state %+v, %v", s, err)
	}
	st, _ := readState(ctr.Dir)
	if err := r.Kill(ctx, id, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctr.Done():
	case <-ctx.Done():
		t.Fatal("killed container did not end")
	}
	if e := ctr.Exit(); e.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v", e)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, st)
	// Delete is idempotent.
	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverAfterCrash(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	before := newRuntime(t, dir)

	// A running container, a created one and one whose create was cut
	// short after its overlay was mounted.
	running, created := newID(t), newID(t)
	for _, id := range []string{running, created} {
		if _, err := before.Create(ctx, lowerDir, Config{ID: id, Resources: Resources{Pids: 16}, Args: []string{"sleep", "1000"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := before.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	half := newID(t)
	hd := filepath.Join(dir, half)
	hs := &State{ID: half, Phase: PhasePreparing, Rootfs: filepath.Join(hd, "rootfs"), Lower: lowerDir}
	for _, d := range []string{"upper", "work", "rootfs"} {
		if err := os.MkdirAll(filepath.Join(hd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeState(hd, hs); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("overlay", hs.Rootfs, "overlay", 0,
		fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lowerDir, filepath.Join(hd, "upper"), filepath.Join(hd, "work"))); err != nil {
		t.Fatal(err)
	}
	var states []*State
	for _, id := range []string{running, created, half} {
		st, err := readState(filepath.Join(dir, id))
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}

	// The agent restarts: a new runtime on the same folder knows nothing
	// but the state files.
	after := newRuntime(t, dir)
	gone, err := after.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 3 {
		t.Errorf("recovered %v, want 3", gone)
	}
	for _, st := range states {
		assertGone(t, after, st)
	}
	if gone, err := after.Recover(ctx); err != nil || len(gone) != 0 {
		t.Errorf("second recover: %v %v", gone, err)
	}
}

// BenchmarkStartToRunning measures create and start of a container until
// runc reports it running, with its image already on the node.
func BenchmarkStartToRunning(b *testing.B) {
	r := newRuntime(b, "")
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("b%d-%d", os.Getpid(), i)
		if _, err := r.Create(ctx, lowerDir, Config{ID: id, ReadOnly: true, Writable: []string{"/work"},
			Resources: Resources{MemoryBytes: 64 << 20, Pids: 64}, Args: []string{"sleep", "1000"}}); err != nil {
			b.Fatal(err)
		}
		if err := r.Start(ctx, id); err != nil {
			b.Fatal(err)
		}
		if s, err := r.State(ctx, id); err != nil || s.Status != "running" {
			b.Fatalf("state %+v %v", s, err)
		}
		b.StopTimer()
		if err := r.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func TestNamespacesAndCPUQuota(t *testing.T) {
	ns := fmt.Sprintf("envlease-ctr-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	nsPath := filepath.Join("/run/netns", ns)
	var want syscall.Stat_t
	if err := syscall.Stat(nsPath, &want); err != nil {
		t.Fatal(err)
	}
	var host syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &host); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, "")
	script := `readlink /proc/self/ns/net; hostname; echo $$; cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu.max`
	for _, tc := range []struct {
		name  string
		netns string
		inode uint64
	}{
		{"made by the agent", nsPath, want.Ino},
		{"new", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			ctr, exit := runToEnd(t, r, Config{ID: id, NetNS: tc.netns, Resources: Resources{CPUs: 0.5}, Args: []string{"sh", "-c", script}})
			out := strings.Fields(logOf(t, ctr, "stdout.log"))
			if exit.Code != 0 || len(out) != 4 {
				t.Fatalf("exit %+v, stdout %q, stderr %q", exit, out, logOf(t, ctr, "stderr.log"))
			}
			switch {
			case tc.inode != 0 && out[0] != fmt.Sprintf("net:[%d]", tc.inode):
				t.Errorf("network namespace %s, want the agent's %d", out[0], tc.inode)
			case out[0] == fmt.Sprintf("net:[%d]", host.Ino):
				t.Errorf("the container shares the node's network namespace")
			}
			if out[1] != id || out[2] != "1" {
				t.Errorf("hostname %s pid %s: want its own UTS and PID namespaces", out[1], out[2])
			}
			if out[3] != "50000" && out[3] != "50000 100000" {
				t.Errorf("cpu quota %q, want half of a 100000 µs period", out[3])
			}
		})
	}
}

// BenchmarkIdleContainerMemory reports what one idle container (a shell
// waiting in sleep) is charged in its memory cgroup: the node's memory per
// running idle container, beside which the runtime keeps no process of its
// own (no shim: the agent reaps the container's process itself).
func BenchmarkIdleContainerMemory(b *testing.B) {
	r := newRuntime(b, "")
	ctx := context.Background()
	const n = 10
	var total int64
	for b.Loop() {
		total = 0
		var ids []string
		for i := range n {
			id := fmt.Sprintf("m%d-%d", os.Getpid(), i)
			ctr, err := r.Create(ctx, lowerDir, Config{ID: id, Resources: Resources{MemoryBytes: 64 << 20},
				Args: []string{"sh", "-c", "sleep 1000"}})
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
			if err := r.Start(ctx, id); err != nil {
				b.Fatal(err)
			}
			st, _ := readState(ctr.Dir)
			for _, d := range st.Cgroups {
				for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
					if v, err := os.ReadFile(filepath.Join(d, f)); err == nil {
						var x int64
						fmt.Sscan(string(v), &x)
						total += x
					}
				}
			}
		}
		for _, id := range ids {
			if err := r.Delete(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(total)/n, "cgroup-bytes/container")
}

// BenchmarkWarmStart measures the start of a container created ahead (a
// warm one): what is left between a claim and a running process.
func BenchmarkWarmStart(b *testing.B) {
	r := newRuntime(b, "")
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		id := fmt.Sprintf("w%d-%d", os.Getpid(), i)
		if _, err := r.Create(ctx, lowerDir, Config{ID: id, ReadOnly: true, Writable: []string{"/work"},
			Resources: Resources{MemoryBytes: 64 << 20, Pids: 64}, Args: []string{"sleep", "1000"}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := r.Start(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := r.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func TestExecInRunningContainer(t *testing.T) {
	r := newRuntime(t, "")
	ctx := testCtx(t)
	id := newID(t)
	if _, err := r.Create(ctx, lowerDir, Config{ID: id, Env: []string{"FROM=spec"}, Cwd: "/work", Args: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	code, err := r.Exec(ctx, id, ExecRequest{Args: []string{"sh", "-c", "read x; echo $x $FROM $EXTRA $(pwd); echo e >&2; exit 3"},
		Env: []string{"EXTRA=exec"}, Stdin: strings.NewReader("in\n"), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 || out.String() != "in spec exec /work\n" || errb.String() != "e\n" {
		t.Fatalf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	if _, err := r.Exec(ctx, "nothing-here", ExecRequest{Args: []string{"true"}}); err == nil {
		t.Fatal("exec in a container that does not exist succeeded")
	}
}

func TestStopGraceThenKill(t *testing.T) {
	r := newRuntime(t, "")
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		script string
		grace  time.Duration
		want   Exit
	}{
		// A process that ends on SIGTERM ends with it.
		{"ends on term", "trap 'exit 0' TERM; echo ready; while true; do sleep 0.05; done", time.Minute, Exit{Code: 0}},
		// One that ignores it is killed after the grace.
		{"ignores term", "trap '' TERM; echo ready; while true; do sleep 0.05; done", 200 * time.Millisecond, Exit{Code: 137, Signal: syscall.SIGKILL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			ctr, err := r.Create(ctx, lowerDir, Config{ID: id, Args: []string{"sh", "-c", tc.script}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
			if err := r.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			// The trap is set once the script printed.
			for logOf(t, ctr, "stdout.log") == "" {
				if ctx.Err() != nil {
					t.Fatal("the script never printed")
				}
				time.Sleep(10 * time.Millisecond)
			}
			exit, err := r.Stop(ctx, id, tc.grace)
			if err != nil {
				t.Fatal(err)
			}
			if exit != tc.want {
				t.Fatalf("exit %+v, want %+v", exit, tc.want)
			}
		})
	}
}

// TestFailedCreateLeavesNothing stands a script in for runc, as go-runc's
// own tests do, to fail the create after the agent mounted the root.
func TestFailedCreateLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "runc")
	// runc's global flags come first; the log file follows --log.
	script := `#!/bin/sh
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --log) log="$2"; shift 2;;
    --version) echo "runc version ` + strings.TrimPrefix(pinned.Version, "v") + `"; exit 0;;
    --*) shift 2;;
    create) [ -n "$log" ] && echo '{"level":"error","msg":"no cgroup for you"}' >> "$log"; exit 1;;
    *) exit 0;;
  esac
done
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Runc: fake, Dir: filepath.Join(dir, "envs")})
	if err != nil {
		t.Fatal(err)
	}
	id := newID(t)
	_, err = r.Create(testCtx(t), lowerDir, Config{ID: id, Args: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "no cgroup for you") {
		t.Fatalf("err = %v, want runc's message", err)
	}
	assertGone(t, r, &State{ID: id, Rootfs: filepath.Join(r.opt.Dir, id, "rootfs")})
}
