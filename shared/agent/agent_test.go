package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
)

type stack struct {
	*apitest.Env
	url string
}

// newStack serves the nodes and environments groups over HTTP with the test
// organizations, plus the given templates in acme's pool "local".
func newStack(t *testing.T, templates ...domain.Template) *stack {
	t.Helper()
	return newStackLinks(t, nil, templates...)
}

// newStackLinks is newStack whose claims sign snapshot links with links.
func newStackLinks(t *testing.T, links nodes.Linker, templates ...domain.Template) *stack {
	t.Helper()
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc := nodes.NewService(e.Store, links, e.Clock, nodes.Options{HeartbeatInterval: 200 * time.Millisecond, PollMax: 20 * time.Millisecond})
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock, environments.WithTemplateTTL(0)))}
	})
	for _, tpl := range templates {
		tpl.Pools = []string{"local"}
		tpl.Timeouts = domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)}
		tpl.Quota = domain.Quota{MaxLeases: 5}
		if err := e.Store.PutTemplate(context.Background(), "acme", tpl); err != nil {
			t.Fatal(err)
		}
	}
	// Every answer, to the test and to the agent, is checked against the API description.
	srv := httptest.NewServer(apitest.CheckedHandler(t, e.Handler))
	t.Cleanup(srv.Close)
	return &stack{Env: e, url: srv.URL}
}

// runAgent starts an agent of acme's pool "local" and stops it at the end.
func (s *stack) runAgent(t *testing.T, grace time.Duration) string {
	t.Helper()
	return s.runAgentIn(t, t.TempDir(), grace)
}

// runAgentIn is runAgent with the given work dir.
func (s *stack) runAgentIn(t *testing.T, dir string, grace time.Duration) string {
	t.Helper()
	return s.runAgentWith(t, dir, grace, nil)
}

// runAgentWith is runAgentIn with the configuration tuned by tune.
func (s *stack) runAgentWith(t *testing.T, dir string, grace time.Duration, tune func(*agent.Config)) string {
	t.Helper()
	s.runAgentReturning(t, dir, grace, tune)
	return dir
}

// runAgentReturning is runAgentWith that returns the running agent.
func (s *stack) runAgentReturning(t *testing.T, dir string, grace time.Duration, tune func(*agent.Config)) *agent.Agent {
	t.Helper()
	svc := nodes.NewService(s.Store, nil, s.Clock, nodes.Options{})
	admin := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}
	issued, err := svc.IssueCredential(context.Background(), admin, "local", "test agent")
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{
		API: s.url, Token: issued.Token, Address: "127.0.0.1", WorkDir: dir, Capacity: 4,
		Grace: grace, ReadyTimeout: time.Minute, ClaimWait: time.Second, Log: s.Log,
	}
	if tune != nil {
		tune(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("agent did not stop")
		}
	})
	return a
}

func (s *stack) lease(t *testing.T, template string) string {
	t.Helper()
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": template})
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var out environments.Leased
	r.JSON(t, &out)
	return out.Environment.ID
}

func (s *stack) wait(t *testing.T, id string, want domain.State) domain.Environment {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard
	for {
		r := s.Do("GET", "/v1/environments/"+id, apitest.BobToken, nil)
		if r.Status != 200 {
			t.Fatalf("get %s: %d %s", id, r.Status, r.Body)
		}
		var out domain.Environment
		r.JSON(t, &out)
		if out.ID != id {
			t.Fatalf("get %s answered %s", id, r.Body)
		}
		if out.State == want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s (%q), want %s", id, out.State, out.Error, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A runtime the agent cannot run fails the environment with a clear error;
// so does a command that exits on its own, with its status and last stderr
// lines; both release the quota.
func TestAgentFailures(t *testing.T) {
	s := newStack(t,
		domain.Template{Name: "vm", Command: []string{"true"}, Runtime: "firecracker"},
		domain.Template{Name: "crash", Command: []string{"sh", "-c", "echo starting; echo 'first words' >&2; echo 'last words' >&2; exit 3"}, Runtime: "process"},
		domain.Template{Name: "missing", Command: []string{"/nonexistent/envlease-cmd"}},
	)
	s.runAgent(t, time.Second)

	vm := s.wait(t, s.lease(t, "vm"), domain.StateFailed)
	if !strings.Contains(vm.Error, `runtime "firecracker" is not supported`) || vm.StopReason != nodes.StopFailed {
		t.Fatalf("unsupported runtime: %q", vm.Error)
	}
	crash := s.wait(t, s.lease(t, "crash"), domain.StateFailed)
	if !strings.Contains(crash.Error, "exited with status 3") || !strings.HasSuffix(crash.Error, "first words\nlast words") || strings.Contains(crash.Error, "starting") {
		t.Fatalf("crash error: %q", crash.Error)
	}
	missing := s.wait(t, s.lease(t, "missing"), domain.StateFailed)
	if !strings.Contains(missing.Error, "/nonexistent/envlease-cmd") {
		t.Fatalf("missing command: %q", missing.Error)
	}
	qs, _ := s.Store.ListQuotas(context.Background(), "acme")
	for _, q := range qs {
		if q.Running != 0 {
			t.Fatalf("%s running %d", q.Template, q.Running)
		}
	}
}

// The command runs in its workdir under the environment's folder, with the
// template's env and its export's port; ready waits for the port; a delete
// sends SIGTERM, and a process that ignores it gets SIGKILL after the grace
// period; then stopped is reported.
func TestAgentRunsAndStops(t *testing.T) {
	script := `trap '' TERM; echo "$GREETING $PWD $EXPORT_API_PORT" > seen; exec python3 -c '
import os, signal, socket, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"]))); s.listen(8)
time.sleep(3600)'`
	s := newStack(t, domain.Template{
		Name: "stubborn", Command: []string{"sh", "-c", script}, Env: map[string]string{"GREETING": "hi"},
		Workdir: "/workspace", Exports: map[string]domain.Export{"api": {Port: 9000}},
		Resources: domain.Resources{Memory: "1Gi", PIDs: 4096, CPUs: 1},
	})
	dir := s.runAgent(t, 700*time.Millisecond)
	id := s.lease(t, "stubborn")
	e := s.wait(t, id, domain.StateReady)
	if len(e.Exports) != 1 || !strings.HasPrefix(e.Exports[0].Target, "127.0.0.1:") || e.ReadyMs == nil {
		t.Fatalf("ready: %+v", e)
	}
	port := strings.TrimPrefix(e.Exports[0].Target, "127.0.0.1:")
	seen, err := os.ReadFile(filepath.Join(dir, "envs", id, "workspace", "seen"))
	if err != nil {
		t.Fatal(err)
	}
	// It works at the template's workdir, as in a container, when it runs
	// in namespaces of its own (its folder is bound there); otherwise in
	// its folder on the node.
	wd := filepath.Join(dir, "envs", id, "workspace")
	if os.Geteuid() == 0 && agent.NamespacesWork() == nil {
		wd = "/workspace"
	}
	if got, want := strings.TrimSpace(string(seen)), "hi "+wd+" "+port; got != want {
		t.Fatalf("the process saw %q, want %q", got, want)
	}
	start := time.Now()
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	s.wait(t, id, domain.StateStopped)
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Fatalf("stopped after %s: the grace period before SIGKILL was not kept", took)
	}
	if _, err := os.Stat(filepath.Join(dir, "envs", id)); !os.IsNotExist(err) {
		t.Fatalf("the environment's folder is left: %v", err)
	}
}

// Snapshots unpack into the root; paths that leave it are refused.
func TestUnpackRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../evil", "/etc/evil", "a/../../evil"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		root := t.TempDir()
		if _, err := agent.Unpack(&buf, root); err == nil {
			t.Errorf("%s was unpacked", name)
		}
	}
	// A link inside is unpacked; with a link out after it, the archive is
	// refused and nothing of it is left.
	for _, out := range []bool{false, true} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "d/", Mode: 0o755, Typeflag: tar.TypeDir})
		_ = tw.WriteHeader(&tar.Header{Name: "d/f", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("ok"))
		_ = tw.WriteHeader(&tar.Header{Name: "d/link", Linkname: "f", Typeflag: tar.TypeSymlink})
		if out {
			_ = tw.WriteHeader(&tar.Header{Name: "d/out", Linkname: "../../x", Typeflag: tar.TypeSymlink})
		}
		_ = tw.Close()
		root := t.TempDir()
		n, err := agent.Unpack(&buf, root)
		if !out {
			if b, _ := os.ReadFile(filepath.Join(root, "d", "link")); err != nil || n != 1 || string(b) != "ok" {
				t.Fatalf("link inside the root: %q (%d, %v)", b, n, err)
			}
			continue
		}
		if err == nil || n != 1 {
			t.Fatalf("a link out of the root was unpacked (%d, %v)", n, err)
		}
		if left, _ := os.ReadDir(root); len(left) != 0 {
			t.Fatalf("the refused archive left %v", left)
		}
	}
}

// A template with warm: 1 has a process started before any lease, and a
// lease is handed that very process (no cold start): deleting the
// environment ends the pre-started process, while the one the pool started
// after the handover to refill it lives on.
func TestWarmLeaseTakesThePreStartedProcess(t *testing.T) {
	starts := filepath.Join(nodeTempDir(t), "starts")
	// As root each warm process runs as a user of its own: the file must be
	// one they can reach and append to.
	writableByAll(t, starts)
	s := newStack(t, domain.Template{
		Name: "warm", Command: []string{"sh", "-c", `echo $$ $(readlink /proc/self/ns/pid) >> "$STARTS"; exec sleep 3600`},
		Env: map[string]string{"STARTS": starts}, Warm: 1,
	})
	a := s.runAgentReturning(t, t.TempDir(), 500*time.Millisecond, nil)
	// A process is its pid and PID namespace: in namespaces of their own
	// (as root) every environment's command is pid 2 of its own.
	type started struct {
		pid int
		ns  string
	}
	pids := func(n int) []started {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			b, _ := os.ReadFile(starts)
			var out []started
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				f := strings.Fields(line)
				if len(f) == 0 {
					continue
				}
				pid, err := strconv.Atoi(f[0])
				if err != nil || len(f) != 2 {
					t.Fatalf("starts file: %q", b)
				}
				out = append(out, started{pid, f[1]})
			}
			if len(out) >= n {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d process(es) started, want %d", len(out), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	warm := pids(1)[0]
	// Leased only once the pool holds it ready: a lease before would be a
	// cold start, rightly, however loaded the machine.
	for deadline := time.Now().Add(time.Minute); a.WarmReady("warm") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the warm process was never ready")
		}
	}
	id := s.lease(t, "warm")
	s.wait(t, id, domain.StateReady)
	refill := pids(2)
	if len(refill) != 2 {
		t.Fatalf("processes started: %v", refill)
	}
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	s.wait(t, id, domain.StateStopped)
	if aliveIn(warm.pid, warm.ns) {
		t.Fatalf("the pre-started process %+v still runs after its environment stopped: the lease had a cold start", warm)
	}
	if !aliveIn(refill[1].pid, refill[1].ns) {
		t.Fatalf("the refill process %+v is gone", refill[1])
	}
}

// TestWarmStartsRefillBoxesMadeAhead: warm processes take boxes made
// ahead as cold starts do, and the node makes them again while it fills its
// warm pool, not when the crowd the pool waits for comes (the first claimed
// environment used to be what refilled them).
func TestWarmStartsRefillBoxesMadeAhead(t *testing.T) {
	const warm = 8 // two rounds of warm starts and more: the boxes are taken
	s := newStack(t, domain.Template{Name: "warm", Command: []string{"sleep", "3600"}, Warm: warm})
	a := s.runAgentReturning(t, t.TempDir(), 500*time.Millisecond, nil)
	if _, makes := a.BoxesMadeAhead(); !makes {
		t.Skip("this node makes no boxes ahead (the agent does not run as root)")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ready, _ := a.BoxesMadeAhead()
		if a.WarmReady("warm") == warm && ready == confine.DefaultPreparedBoxes && !a.MakingBoxes() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d warm ready, %d of %d boxes made ahead, making more: %v; nothing was leased",
				a.WarmReady("warm"), warm, ready, confine.DefaultPreparedBoxes, a.MakingBoxes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// aliveIn says whether pid of the PID namespace ns ("pid:[inode]") runs:
// a process of the node's own namespace, or any process of another.
func aliveIn(pid int, ns string) bool {
	if own, _ := os.Readlink("/proc/self/ns/pid"); ns == own {
		return alive(pid)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if l, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid"); l == ns {
			if n, err := strconv.Atoi(e.Name()); err == nil && alive(n) {
				return true
			}
		}
	}
	return false
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// An agent restarted on the work dir of a run that crashed (its processes
// live on in their own process groups) kills those processes and removes
// their folders before it registers; a process of another folder is left
// alone. A second agent on a work dir in use is refused.
func TestRestartedAgentClearsLeftovers(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	start := func(root string) *exec.Cmd {
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", "sleep 3600 & exec sleep 3600")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "ENVLEASE_ROOT="+root)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		return cmd
	}
	old := filepath.Join(dir, "envs", "env_fromacrash")
	left := start(old)
	warm := start(filepath.Join(dir, "envs", "warm-0123456789ab"))
	other := start(filepath.Join(elsewhere, "envs", "env_notmine"))
	exited := func(cmd *exec.Cmd) chan struct{} {
		ch := make(chan struct{})
		go func() { _ = cmd.Wait(); close(ch) }()
		return ch
	}
	leftDone, warmDone := exited(left), exited(warm)

	s := newStack(t)
	s.runAgentIn(t, dir, time.Second)
	for _, ch := range []chan struct{}{leftDone, warmDone} {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatal("a process left by the earlier run still runs")
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(old); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leftover folder is still there")
		}
	}
	if !alive(other.Process.Pid) {
		t.Fatal("a process of another work dir was killed")
	}

	second, err := agent.New(agent.Config{API: s.url, Token: "els_node_x", Address: "127.0.0.1", WorkDir: dir, Log: s.Log})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- second.Run(context.Background()) }()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "in use by another agent") {
			t.Fatalf("second agent on the same work dir: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a second agent runs on a work dir in use")
	}
}
