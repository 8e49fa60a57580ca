//go:build linux

package nsinit_test

import (
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/agent/nsinit"
)

// execIn runs cfg through c's init with in as its input and returns its
// output and wait status, or why it did not start. With signal, it sends
// that signal once the command runs.
func execIn(t *testing.T, c *nsinit.Cmd, cfg nsinit.Config, in string, signal syscall.Signal) (string, syscall.WaitStatus, error) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, warns, err := c.Exec(cfg, inR, outW, outW)
	if len(warns) > 0 {
		t.Errorf("not applied: %v", warns)
	}
	inR.Close()
	outW.Close()
	defer outR.Close()
	if err != nil {
		inW.Close()
		return "", 0, err
	}
	go func() { _, _ = io.WriteString(inW, in); inW.Close() }()
	if signal != 0 {
		if err := p.Signal(signal); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := io.ReadAll(outR)
	return string(out), p.Wait(), nil
}

// A command run through a running environment's init sees its namespaces
// (its PID namespace, where the environment's command is PID 2, and its
// /proc), runs in the folder and as the user it is given, gets its input,
// its signals and the limits asked for from its first instruction, and its
// wait status comes back.
func TestExec(t *testing.T) {
	c, dir := start(t, "echo up > up; exec sleep 600")
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	waitFile(t, dir+"/up")
	for _, tc := range []struct {
		name, script, in string
		uid              int
		limits           []nsinit.Rlimit
		signal           syscall.Signal
		want             string
		code             int
		killed           syscall.Signal
	}{
		{name: "namespaces", script: `echo $(pwd) $$ $(tr '\0' ' ' < /proc/1/cmdline); exit 3`, uid: -1, code: 3, want: dir + " "},
		{name: "input", script: `read x; echo got $x`, in: "hello\n", uid: -1, want: "got hello"},
		{name: "user", script: `id -u; id -G; grep ^NoNewPrivs: /proc/self/status`, uid: 65534, want: "65534\n65534\nNoNewPrivs:\t1"},
		{name: "limits", script: `ulimit -v; grep "^Max processes" /proc/self/limits | tr -s " " | cut -d" " -f3`, uid: 65534, want: "16384\n4096",
			limits: []nsinit.Rlimit{{Resource: unix.RLIMIT_AS, Max: 16 << 20}, {Resource: unix.RLIMIT_NPROC, Max: 4096}}},
		{name: "signal", script: `exec sleep 600`, uid: 65534, signal: syscall.SIGTERM, killed: syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd := dir
			if tc.uid >= 0 {
				wd = "/" // the test's folder is root's alone
			}
			out, ws, err := execIn(t, c, nsinit.Config{Path: "/bin/sh", Args: []string{"sh", "-c", tc.script},
				Dir: wd, Env: []string{"PATH=/usr/bin:/bin"}, UID: tc.uid, GID: tc.uid, Rlimits: tc.limits}, tc.in, tc.signal)
			if err != nil {
				t.Fatal(err)
			}
			if tc.killed != 0 {
				if !ws.Signaled() || ws.Signal() != tc.killed {
					t.Errorf("status %v, want killed by %v", ws, tc.killed)
				}
			} else if !ws.Exited() || ws.ExitStatus() != tc.code {
				t.Errorf("status %v, want exit %d", ws, tc.code)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output %q, want %q", out, tc.want)
			}
			if tc.name == "namespaces" && !strings.Contains(out, "envlease-nsinit") {
				t.Errorf("the command does not see the environment's processes: %q", out)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		_, _, err := execIn(t, c, nsinit.Config{Path: "/no/such/command", Args: []string{"x"}, Dir: "/", UID: 65534, GID: 65534}, "", 0)
		if err == nil || err.Error() != `start "/no/such/command": no such file or directory` {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		big := "X=" + strings.Repeat("x", 1<<20)
		if _, _, err := execIn(t, c, nsinit.Config{Path: "/bin/true", Args: []string{"true"}, Dir: "/", Env: []string{big}, UID: -1, GID: -1}, "", 0); err == nil {
			t.Fatal("a command with 1 MiB of environment ran")
		}
		// The init still runs commands.
		if _, ws, err := execIn(t, c, nsinit.Config{Path: "/bin/true", Args: []string{"true"}, Dir: "/", UID: -1, GID: -1}, "", 0); err != nil || ws.ExitStatus() != 0 {
			t.Fatalf("after a refusal: %v %v", ws, err)
		}
	})
}

// A command still running when the environment ends goes with it, and is
// told as killed.
func TestExecOutlivedByInit(t *testing.T) {
	c, dir := start(t, "echo up > up; exec sleep 600")
	waitFile(t, dir+"/up")
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	p, _, err := c.Exec(nsinit.Config{Path: "/bin/sleep", Args: []string{"sleep", "600"}, Dir: "/", UID: 65534, GID: 65534}, outR, outW, outW)
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Process.Kill()
	_ = c.Wait()
	done := make(chan syscall.WaitStatus)
	go func() { done <- p.Wait() }()
	select {
	case ws := <-done:
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("status %v, want killed", ws)
		}
	case <-time.After(time.Minute):
		t.Fatal("the command's end was not told")
	}
	if _, _, err := c.Exec(nsinit.Config{Path: "/bin/true", Args: []string{"true"}, Dir: "/", UID: -1, GID: -1}, outR, outR, outR); err == nil {
		t.Fatal("a command ran through an init that had ended")
	}
}

// A command given a terminal runs in a session of its own whose
// controlling terminal that is, started directly or through the second
// stage (a limit the init may not set itself on this node).
func TestExecTerminal(t *testing.T) {
	c, dir := start(t, "echo up > up; exec sleep 600")
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	waitFile(t, dir+"/up")
	for _, tc := range []struct {
		name   string
		limits []nsinit.Rlimit
	}{
		{"plain", nil},
		{"limited", []nsinit.Rlimit{{Resource: unix.RLIMIT_AS, Max: 1 << 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, s, err := pty.Open()
			if err != nil {
				t.Skipf("no pseudo-terminal: %v", err)
			}
			defer m.Close()
			p, _, err := c.Exec(nsinit.Config{Path: "/bin/sh", Args: []string{"sh", "-c", `test -t 0 && echo tty-ok; test "$(cut -d' ' -f6 /proc/$$/stat)" = $$ && echo leader-ok; tr -d '\n' < /proc/$$/stat | cut -d' ' -f7`},
				Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}, UID: 65534, GID: 65534, Terminal: true, Rlimits: tc.limits}, s, s, s)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(m) // ends with EIO once the command has
			if ws := p.Wait(); !ws.Exited() || ws.ExitStatus() != 0 {
				t.Errorf("status %v", ws)
			}
			if !strings.Contains(string(out), "tty-ok") || !strings.Contains(string(out), "leader-ok") {
				t.Errorf("output %q: want a terminal and a session of its own", out)
			}
		})
	}
}
