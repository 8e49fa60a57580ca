package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// background is a command left running, as a person leaves port-forward.
type background struct {
	cmd    *exec.Cmd
	stdout *os.File
	stderr syncBuffer
	done   chan struct{}
}

// syncBuffer is standard error, read while the command writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (u *user) start(args ...string) *background {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	b := &background{cmd: exec.CommandContext(ctx, binary, args...), done: make(chan struct{})}
	b.cmd.Dir = u.home
	b.cmd.Env = append([]string{
		"HOME=" + u.home,
		"XDG_CONFIG_HOME=" + filepath.Join(u.home, ".config"),
		"PATH=" + os.Getenv("PATH"),
	}, u.env...)
	b.cmd.Stderr = &b.stderr
	// An OS pipe rather than StdoutPipe: the command writes into it
	// directly, so Wait never waits for the test to read.
	r, w, err := os.Pipe()
	if err != nil {
		u.t.Fatal(err)
	}
	b.cmd.Stdout, b.stdout = w, r
	if err := b.cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	w.Close()
	go func() { _ = b.cmd.Wait(); close(b.done); cancel() }()
	u.t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
		r.Close()
	})
	return b
}

// waitFor waits until the command has said want on standard error.
func (b *background) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(b.stderr.String(), want) {
		select {
		case <-b.done:
			t.Fatalf("the command ended (exit %d) before saying %q:\n%s", b.cmd.ProcessState.ExitCode(), want, b.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never said %q:\n%s", want, b.stderr.String())
		}
	}
}

// interrupt sends Ctrl-C's signal and returns the exit code.
func (b *background) interrupt(t *testing.T) int {
	t.Helper()
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	<-b.done
	return b.cmd.ProcessState.ExitCode()
}

// port-forward (the real binary, against the whole stack) listens on the
// export's listen address, and an HTTP request there is answered by the
// environment's own web server on the node, through the agent's tunnel.
func TestPortForward(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var sb domain.Sandbox
	u.json(&sb, "sandbox", "register", "--name", "laptop")
	var leased client.Leased
	u.json(&leased, "lease", "--template", "shell", "--wait")
	env := leased.Environment
	if env.State != domain.StateReady || len(env.Exports) != 1 || env.Exports[0].Listen == "" || env.Exports[0].Target == "" {
		t.Fatalf("leased %+v", env)
	}
	web := env.Exports[0]

	pf := u.start("port-forward", env.ID, "-o", "json")
	var out struct {
		Environment string             `json:"environment"`
		Exports     []domain.EnvExport `json:"exports"`
	}
	if err := json.NewDecoder(pf.stdout).Decode(&out); err != nil {
		<-pf.done
		t.Fatalf("port-forward -o json: %v\nstderr: %s", err, pf.stderr.String())
	}
	if out.Environment != env.ID || len(out.Exports) != 1 || out.Exports[0] != web {
		t.Fatalf("port-forward printed %+v, want %+v", out, web)
	}

	get := func(addr string) (int, string) {
		t.Helper()
		hc := &http.Client{Timeout: time.Minute} // a hang guard
		res, err := hc.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("GET http://%s/: %v\nport-forward's stderr: %s", addr, err, pf.stderr.String())
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	status, body := get(web.Listen)
	// The same export, reached through a tunnel of the test's own.
	directStatus, direct := s.GetThroughTunnel(t, clienttest.BobToken, env.ID, web.Target, "/")
	if status != 200 || body != direct || directStatus != 200 || !strings.Contains(body, "Directory listing") {
		t.Fatalf("through port-forward: %d %q\nthrough a tunnel: %d %q", status, body, directStatus, direct)
	}
	// As root the export listens only in the environment's own network
	// namespace: it does not answer at the target on the node (whatever
	// else of the machine may listen on that port).
	if os.Geteuid() == 0 {
		if res, err := (&http.Client{Timeout: time.Minute}).Get("http://" + web.Target + "/"); err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) == direct {
				t.Fatalf("the export answered at %s on the node's own address", web.Target)
			}
		}
	}
	// Many at once, over the one tunnel.
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			res, err := http.Get("http://" + web.Listen + "/")
			if err == nil {
				res.Body.Close()
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent request: %v", err)
		}
	}

	// A second port-forward of the environment cannot have its address.
	r := u.fails(exitError, "", "port-forward", env.ID)
	contains(t, "second port-forward", r.stderr, web.Listen)

	if code := pf.interrupt(t); code != exitInterrupted {
		t.Fatalf("port-forward after Ctrl-C: exit %d\nstderr: %s", code, pf.stderr.String())
	}
	contains(t, "port-forward's stderr", pf.stderr.String(), web.Listen+" -> web ("+web.Target+")")

	// When the environment ends, the tunnel closes and port-forward exits,
	// saying why.
	pf = u.start("port-forward", env.ID)
	pf.waitFor(t, "Forwarding")
	u.ok("rm", env.ID)
	<-pf.done
	if code := pf.cmd.ProcessState.ExitCode(); code != exitError || !strings.Contains(pf.stderr.String(), env.ID) {
		t.Fatalf("port-forward of a deleted environment: exit %d\nstderr: %s", code, pf.stderr.String())
	}
	u.fails(exitNotFound, "", "port-forward", "env_nope")
}
