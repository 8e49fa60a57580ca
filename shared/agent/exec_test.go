//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/execsession"
	"github.com/envlease/envlease/shared/tunnel"
)

// execTicket asks the API for a ticket that runs argv in env.
func (s *stack) execTicket(t *testing.T, env string, argv []string, tty bool) environments.Exec {
	t.Helper()
	r := s.Do("POST", "/v1/environments/"+env+"/exec", apitest.BobToken, map[string]any{"command": argv, "tty": tty})
	if r.Status != 200 {
		t.Fatalf("exec ticket: %d %s", r.Status, r.Body)
	}
	var x environments.Exec
	r.JSON(t, &x)
	return x
}

// syncBuffer is output written by one goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// awaitOutput waits until out holds want (a hang guard, no time limit
// asserted).
func awaitOutput(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q; it shows %q", want, out.String())
		}
	}
}

// checkExec runs commands inside a ready environment through the whole
// stack (the API's ticket, the agent's endpoint, the runtime): exit codes,
// input, output and errors apart, the environment's user and namespaces,
// a command the ticket does not name refused, and a shell in a terminal
// driven like a person at it (a resize seen inside, Ctrl-C ending the
// foreground command and not the shell, its exit code).
func checkExec(t *testing.T, s *stack, id string, namespaced bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	for _, tc := range []struct {
		name, script, stdin string
		skip                bool
		code                int
		stdout, stderr      string
	}{
		{name: "exit code", script: "exit 7", code: 7},
		{name: "input", script: `read x; echo "got $x"`, stdin: "hello\n", stdout: "got hello\n"},
		{name: "output apart", script: "echo out; echo err >&2", stdout: "out\n", stderr: "err\n"},
		{name: "its user and folder", script: `test "$(id -u)" = "$(cat .uid)" && echo user`, stdout: "user\n"},
		{name: "its PID namespace", skip: !namespaced, script: `test "$(cat /proc/1/cmdline | tr '\0' ' ')" != "" && ls /proc | grep -c '^[0-9]' | awk '$1 < 20 {print "few"}'`, stdout: "few\n"},
		{name: "a signal", script: "kill -TERM $$", code: 143},
		{name: "all of the input", script: "wc -c", stdin: strings.Repeat("x", 1<<20), stdout: "1048576"},
	} {
		if tc.skip {
			continue
		}
		argv := []string{"sh", "-c", tc.script}
		x := s.execTicket(t, id, argv, false)
		var out, errs bytes.Buffer
		code, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: argv, Stdin: strings.NewReader(tc.stdin), Stdout: &out, Stderr: &errs})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || errs.String() != tc.stderr {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.name, code, out.String(), errs.String(), tc.code, tc.stdout, tc.stderr)
		}
	}

	// The ticket runs its own command and nothing else; a tunnel's ticket
	// runs none.
	x := s.execTicket(t, id, []string{"true"}, false)
	_, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: []string{"sh", "-c", "echo other"}})
	var re *execsession.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "not the one the ticket was issued for") {
		t.Errorf("another command than the ticket's: %v", err)
	}
	r := s.Do("POST", "/v1/environments/"+id+"/tunnel", apitest.BobToken, nil)
	if r.Status == 200 {
		var tk environments.Tunnel
		r.JSON(t, &tk)
		if _, err := execsession.Run(ctx, tk.URL, tk.Ticket, execsession.Options{Command: []string{"true"}}); !errors.As(err, &re) {
			t.Errorf("a tunnel ticket ran a command: %v", err)
		}
	}
	// An exec ticket opens no tunnel.
	if sess, err := tunnel.Dial(ctx, nil, x.URL, x.Ticket); err == nil {
		if c, err := sess.Open(ctx, "127.0.0.1:1"); err == nil {
			c.Close()
			t.Error("an exec ticket opened a tunnel stream")
		}
		sess.Close()
	}

	// A shell in a terminal.
	shell := []string{"sh"}
	x = s.execTicket(t, id, shell, true)
	inR, inW := io.Pipe()
	defer inW.Close()
	var term syncBuffer
	resize := make(chan execsession.Size, 1)
	done := make(chan struct{})
	var code int
	go func() {
		defer close(done)
		code, err = execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: shell, TTY: true, Size: execsession.Size{Rows: 30, Cols: 90},
			Stdin: inR, Stdout: &term, Resize: resize})
	}()
	say := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s); err != nil {
			t.Fatalf("type %q: %v", s, err)
		}
	}
	say("test -t 0 && echo tty-$((6*7)); stty size\n")
	awaitOutput(t, &term, "tty-42")
	awaitOutput(t, &term, "30 90")
	resize <- execsession.Size{Rows: 50, Cols: 132}
	// The new size reaches the terminal inside; ask until it has.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(term.String(), "50 132"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the resize never reached the terminal: %q", term.String())
		}
		say("stty size\n")
	}
	// Ctrl-C ends the foreground command, not the shell.
	// The Ctrl-C is sent once the foreground command itself has printed:
	// one sent while the shell still reads its line would flush that line
	// (the terminal's ISIG), and the shell could take the signal after
	// reading the next one. Nor is the shell's own output enough: with job
	// control the shell's child takes the terminal (setpgid, tcsetpgrp)
	// only after the fork, so a Ctrl-C before that reaches the shell, which
	// holds it while it waits, and the command keeps the terminal and runs
	// on, as on any terminal.
	say("sh -c 'echo started-$((3+4)); exec sleep 600'; echo after-$((1+1))\n")
	awaitOutput(t, &term, "started-7")
	say("\x03")
	// The shell is back at its prompt once it answers; ask until it has.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(term.String(), "alive-5"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell never answered after Ctrl-C: %q", term.String())
		}
		say("echo alive-$((2+3))\n")
	}
	say("exit 5\n")
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the shell did not end")
	}
	if err != nil || code != 5 {
		t.Fatalf("shell: exit %d, %v; terminal %q", code, err, term.String())
	}
	if strings.Contains(term.String(), "after-2") {
		t.Errorf("Ctrl-C did not end the foreground command: %q", term.String())
	}
}

// Commands and a shell inside a process environment, in its namespaces.
func TestExecProcess(t *testing.T) {
	s := newStack(t, domain.Template{Name: "box", Command: []string{"sh", "-c", "id -u > .uid; exec sleep 3600"}})
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	s.runAgent(t, time.Second)
	id := s.lease(t, "box")
	s.wait(t, id, domain.StateReady)
	checkExec(t, s, id, true)
}

// An environment runs at most MaxExecs commands at once: one more is
// refused saying so, and the slot frees when one ends.
func TestExecSessionsAreBounded(t *testing.T) {
	s := newStack(t, domain.Template{Name: "box", Command: []string{"sh", "-c", "exec sleep 3600"}})
	s.Clock.Set(time.Now())
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.MaxExecs = 2 })
	id := s.lease(t, "box")
	s.wait(t, id, domain.StateReady)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	// Two commands that wait for their input to end hold both slots.
	held := []string{"cat"}
	var inputs []*io.PipeWriter
	var ended sync.WaitGroup
	for range 2 {
		x := s.execTicket(t, id, held, false)
		r, w := io.Pipe()
		inputs = append(inputs, w)
		var out syncBuffer
		ended.Add(1)
		go func() {
			defer ended.Done()
			_, _ = execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: held, Stdin: r, Stdout: &out})
		}()
		_, _ = w.Write([]byte("up\n"))
		awaitOutput(t, &out, "up")
	}
	argv := []string{"echo", "third"}
	x := s.execTicket(t, id, argv, false)
	_, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: argv})
	var re *execsession.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "runs 2 commands and shells already") {
		t.Fatalf("a third command at once: %v, want it refused for the bound", err)
	}
	inputs[0].Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		x := s.execTicket(t, id, argv, false)
		var out bytes.Buffer
		code, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: argv, Stdout: &out})
		if err == nil && code == 0 && out.String() == "third\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no command after one ended: %d %q %v", code, out.String(), err)
		}
	}
	inputs[1].Close()
	ended.Wait()
}

// The same as a process of the node, where the agent cannot make
// namespaces: in the environment's folder, as its user, in its cgroup.
func TestExecProcessWithoutNamespaces(t *testing.T) {
	s := newStack(t, domain.Template{Name: "box", Command: []string{"sh", "-c", "id -u > .uid; exec sleep 3600"}})
	s.Clock.Set(time.Now())
	s.runAgentWith(t, t.TempDir(), time.Second, agent.WithoutNamespaces)
	id := s.lease(t, "box")
	s.wait(t, id, domain.StateReady)
	checkExec(t, s, id, false)
}

// Commands and a shell inside a container, with runc exec.
func TestExecContainer(t *testing.T) {
	ref := busyboxRef(t)
	s := newStack(t, domain.Template{Name: "box", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref},
		Command: []string{"sh", "-c", "id -u > .uid; exec sleep 3600"}, Workdir: "/work", Writable: []string{"/work"}})
	s.Clock.Set(time.Now())
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })
	id := s.lease(t, "box")
	s.waitLong(t, id, domain.StateReady)
	checkExec(t, s, id, true)
}
