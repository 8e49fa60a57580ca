package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// filesTemplate serves its workdir, /workspace, over HTTP; its share src
// lands in it at src/, so what was shared can be read back through the
// export. Its port is the node's choice, so tests do not contend for one.
var filesTemplate = domain.Template{
	Name: "files", Description: "serves its workdir, where the share src lands",
	Command: []string{"sh", "-c", `exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
	Workdir: "/workspace", Runtime: "process",
	Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
	Exports:  map[string]domain.Export{"web": {}},
	Shares:   []domain.TemplateShare{{Name: "src", Path: "/workspace/src", Direction: "in", Exclude: []string{"*.log"}}},
	Quota:    domain.Quota{MaxLeases: 4},
}

// brokenTemplate fails as it starts (its export makes readiness wait for
// it: without one, a process is ready after 50 ms, which a loaded machine
// may pass before it exits).
var brokenTemplate = domain.Template{
	Name: "broken", Command: []string{"sh", "-c", "echo the database is missing >&2; exit 3"}, Runtime: "process",
	Exports:  map[string]domain.Export{"web": {Port: 8080}},
	Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2},
}

// shareTree makes a folder with what a share may and may not carry.
func shareTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "alpha")
	write("sub/b.txt", "beta")
	write("debug.log", "excluded by the template")
	write("node_modules/x.js", "excluded by --exclude")
	for name, target := range map[string]string{"link": "a.txt", "out": "../../etc/passwd", "abs": "/etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fetch GETs a path of an environment's export target, through the tunnel.
func fetch(t *testing.T, s *clienttest.Stack, env, target, path string) (int, string) {
	t.Helper()
	return s.GetThroughTunnel(t, clienttest.BobToken, env, target, path)
}

// The files of --share arrive in the environment at the share's path under
// the environment's folder (/workspace/src -> ./src of the workdir), before
// the command starts; what the template and --exclude exclude, and links
// that lead out, stay behind.
func TestLeaseShareSendsFiles(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", filesTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	dir := shareTree(t)

	r := u.run("", "lease", "-t", "files", "--share", "src="+dir, "--exclude", "node_modules", "--no-sandbox", "--wait", "-o", "json")
	if r.code != 0 {
		t.Fatalf("lease --share: exit %d\n%s", r.code, r.stderr)
	}
	contains(t, "lease --share stderr", r.stderr, "Packing share src", "left out abs", "left out out", "Uploaded share src as art_")
	var leased client.Leased
	if err := json.Unmarshal([]byte(r.stdout), &leased); err != nil {
		t.Fatal(err)
	}
	env := leased.Environment
	if len(env.Shares) != 1 || !strings.HasPrefix(env.Shares[0].Artifact, "art_") || env.Shares[0].LocalPath != dir ||
		!slices.Equal(env.Shares[0].Files, []string{"a.txt", "link", "sub/b.txt"}) || env.Shares[0].EnvPath != "/workspace/src" {
		t.Fatalf("shares %+v", env.Shares)
	}
	target := env.Exports[0].Target
	for path, want := range map[string]string{"/src/a.txt": "alpha", "/src/sub/b.txt": "beta", "/src/link": "alpha"} {
		if code, body := fetch(t, s, env.ID, target, path); code != 200 || body != want {
			t.Errorf("%s: %d %q, want %q", path, code, body, want)
		}
	}
	for _, path := range []string{"/src/debug.log", "/src/node_modules/x.js", "/src/out", "/src/abs"} {
		if code, _ := fetch(t, s, env.ID, target, path); code != 404 {
			t.Errorf("%s: %d, want 404", path, code)
		}
	}
	u.ok("rm", env.ID)

	// A share the template lacks is refused before anything is uploaded.
	r = u.fails(exitUsage, "", "lease", "-t", "files", "--share", "docs="+dir)
	contains(t, "unknown share", r.stderr, `has no share "docs"`, "its shares: src")
}

// run: the command runs with ENVLEASE_ENV and ENVLEASE_<SERVICE>, the
// export forwarded there, after the shared files arrived; envlease exits
// with the command's code and deletes the environment after it. The first
// run registers the sandbox.
func TestRunExitsWithTheCommandsCodeAndDeletes(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", filesTemplate, brokenTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	dir := shareTree(t)
	script := filepath.Join(t.TempDir(), "cmd.sh")
	// The command reads the shared file through the forwarded export as it
	// starts, so it proves both the forwarding and that the file was there.
	if err := os.WriteFile(script, []byte(`set -e
echo "env=$ENVLEASE_ENV web=$ENVLEASE_WEB"
echo "a.txt=$(curl -fsS "http://$ENVLEASE_WEB/src/a.txt")"
exit 7
`), 0o644); err != nil {
		t.Fatal(err)
	}

	r := u.run("", "run", "-t", "files", "--share", "src="+dir, "--", "sh", script)
	if r.code != 7 {
		t.Fatalf("run: exit %d, want 7\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	m := regexp.MustCompile(`env=(env_\S+) web=(127\.0\.0\.1:\d+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("the command's environment: %q", r.stdout)
	}
	contains(t, "run stdout", r.stdout, "a.txt=alpha")
	contains(t, "run stderr", r.stderr, "registering this machine", "Leased "+m[1], "is ready", "Deleted "+m[1])
	var got domain.Environment
	u.json(&got, "get", m[1])
	if got.State.Live() || got.StopReason != domain.StopDeleted || len(got.Exports) != 1 || got.Exports[0].Listen != m[2] {
		t.Fatalf("after run: %s (%s), exports %+v", got.State, got.StopReason, got.Exports)
	}

	// The second run leases with the sandbox the first registered; a
	// command that succeeds is exit 0.
	r = u.run("", "run", "-t", "files", "--", "true")
	if r.code != 0 || strings.Contains(r.stderr, "registering") {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}

	// An environment that fails says why, and the command never runs.
	r = u.fails(exitError, "", "run", "-t", "broken", "--", "sh", "-c", "echo ran")
	contains(t, "failed run", r.stderr, "failed", "the database is missing")
	if strings.Contains(r.stdout, "ran") {
		t.Fatalf("the command ran: %q", r.stdout)
	}
	u.fails(exitUsage, "", "run", "-t", "files", "true")
}

// spawned is a run of envlease whose output the test follows while it runs.
type spawned struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *strings.Builder
}

func (u *user) spawn(args ...string) *spawned {
	u.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = u.home
	cmd.Env = append([]string{"HOME=" + u.home, "XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"), "PATH=" + os.Getenv("PATH")}, u.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		u.t.Fatal(err)
	}
	b := &spawned{cmd: cmd, lines: make(chan string, 16), stderr: &strings.Builder{}}
	cmd.Stderr = b.stderr
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	u.t.Cleanup(func() { _ = cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
	}()
	return b
}

// line waits for the command's next line of output.
func (b *spawned) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-b.lines:
		if !ok {
			t.Fatalf("the output ended; stderr: %s", b.stderr)
		}
		return l
	case <-time.After(hangGuard):
		t.Fatalf("no output; stderr: %s", b.stderr)
	}
	return ""
}

// wait waits for the run to end and returns its exit code.
func (b *spawned) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(hangGuard):
		t.Fatalf("the run did not end; stderr: %s", b.stderr)
	}
	return -1
}

// Ctrl-C (SIGINT to envlease alone) is passed on to the command, the
// environment is deleted, and envlease exits 130.
func TestRunInterruptedDeletes(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	b := u.spawn("run", "-t", "sleeper", "--", "sh", "-c", `echo "started $ENVLEASE_ENV"; exec sleep 600`)
	id := strings.TrimPrefix(b.line(t), "started ")
	if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t); code != exitInterrupted {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitInterrupted, b.stderr)
	}
	contains(t, "stderr", b.stderr.String(), "Deleted "+id, "envlease: interrupted")
	var got domain.Environment
	u.json(&got, "get", id)
	if got.State.Live() || got.StopReason != domain.StopDeleted {
		t.Fatalf("after the interrupt: %s (%s)", got.State, got.StopReason)
	}
}

// While the command runs the environment is touched; when it ends anyway
// (deleted elsewhere) the command is stopped and envlease says why (exit 4).
func TestRunTouchesAndStopsWhenTheEnvironmentEnds(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	b := u.spawn("run", "-t", "sleeper", "--idle", "15s", "--", "sh", "-c", `echo "started $ENVLEASE_ENV"; exec sleep 600`)
	id := strings.TrimPrefix(b.line(t), "started ")
	var first domain.Environment
	u.json(&first, "get", id)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for {
		var e domain.Environment
		u.json(&e, "get", id)
		if e.IdleUntil.After(first.IdleUntil) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never touched: idleUntil stays %s", first.IdleUntil)
		case <-time.After(500 * time.Millisecond):
		}
	}
	u.ok("rm", id)
	if code := b.wait(t); code != exitNotFound {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitNotFound, b.stderr)
	}
	contains(t, "stderr", b.stderr.String(), id+" ended while the command ran: it was deleted")
}

func TestExportVariableNames(t *testing.T) {
	for in, want := range map[string]string{"web": "ENVLEASE_WEB", "api-v2": "ENVLEASE_API_V2", "db.main": "ENVLEASE_DB_MAIN"} {
		if got := exportVar(in); got != want {
			t.Errorf("exportVar(%q) = %q, want %q", in, got, want)
		}
	}
	for idle, want := range map[time.Duration]time.Duration{30 * time.Minute: time.Minute, 90 * time.Second: 30 * time.Second, time.Second: time.Second} {
		if got := touchEvery(idle); got != want {
			t.Errorf("touchEvery(%s) = %s, want %s", idle, got, want)
		}
	}
}
