package runc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	gorunc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Running is a command runc execs into a running container, running:
// runc stays its parent, passes signals it gets on to it and exits with
// its status.
type Running struct {
	// Pid is runc's.
	Pid  int
	done chan struct{}
	code int
	err  error
}

// Wait returns the command's exit code (128 + the signal that ended it,
// as runc reports it).
func (p *Running) Wait() (int, error) { <-p.done; return p.code, p.err }

// Signal sends sig to runc, which passes it on to the command.
func (p *Running) Signal(sig syscall.Signal) error { return syscall.Kill(p.Pid, sig) }

// Terminal is the size of the terminal of a command ExecStart starts.
type Terminal struct{ Rows, Cols uint16 }

// ExecStart starts a command in a running container beside its process,
// as Exec does, and returns once runc runs. With term the command gets a
// terminal of its own made by runc, of term's size, which runc copies to
// and from e's streams (then a terminal's slave: runc sets it raw and
// carries its size changes, SIGWINCH, inside); attr adjusts runc's process
// attributes (a session whose controlling terminal that is). e.Env
// replaces the container's variables of the same names.
func (r *Runtime) ExecStart(ctx context.Context, id string, e ExecRequest, term *Terminal, attr func(*syscall.SysProcAttr)) (*Running, error) {
	if len(e.Args) == 0 {
		return nil, errors.New("container exec: no command")
	}
	dir := r.dir(id)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil || spec.Process == nil {
		return nil, fmt.Errorf("container %s: its spec: %v", id, err)
	}
	p := *spec.Process
	p.Args = e.Args
	p.Env = mergeEnv(p.Env, e.Env)
	if e.Cwd != "" {
		p.Cwd = e.Cwd
	}
	p.Terminal = term != nil
	p.ConsoleSize = nil
	if term != nil && term.Rows > 0 && term.Cols > 0 {
		// The size is set where runc makes the terminal, before the
		// command runs: runc copies its own terminal's size in only once
		// the command runs, and a command quick enough (stty size typed
		// ahead into a shell, on a busy node) read 0 0 before that.
		p.ConsoleSize = &specs.Box{Height: uint(term.Rows), Width: uint(term.Cols)}
	}
	logFile := filepath.Join(dir, "runc.log")
	started := make(chan int, 1)
	run := &Running{done: make(chan struct{})}
	go func() {
		defer close(run.done)
		err := r.runc(logFile).Exec(ctx, id, p, &gorunc.ExecOpts{IO: attrIO{streamIO{e.Stdin, e.Stdout, e.Stderr}, attr}, Started: started})
		var ee *gorunc.ExitError
		switch {
		case errors.As(err, &ee):
			run.code = ee.Status
		case err != nil:
			run.err = fmt.Errorf("container %s: runc exec: %w%s", id, err, runcLog(logFile))
		}
	}()
	pid, ok := <-started
	if !ok || pid == 0 {
		<-run.done
		if run.err == nil {
			run.err = fmt.Errorf("container %s: runc exec did not start", id)
		}
		return nil, run.err
	}
	run.Pid = pid
	return run, nil
}

// mergeEnv is env with add's variables in place of those of the same name.
func mergeEnv(env, add []string) []string {
	out := make([]string, 0, len(env)+len(add))
	names := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// attrIO is streamIO that also adjusts runc's process attributes.
type attrIO struct {
	streamIO
	attr func(*syscall.SysProcAttr)
}

func (a attrIO) Set(cmd *exec.Cmd) {
	a.streamIO.Set(cmd)
	if a.attr != nil {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		a.attr(cmd.SysProcAttr)
	}
}

var _ io.Closer = attrIO{}
