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

	gorunc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ExecRequest is a command run in a running container beside its process,
// as its process's user, with its capabilities and limits.
type ExecRequest struct {
	Args []string
	// Env is added to the container's process's environment.
	Env []string
	// Cwd defaults to the container's process's working folder.
	Cwd    string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Exec runs a command in a running container and waits for it; it gives the
// command's exit status (an error only when it could not be run).
func (r *Runtime) Exec(ctx context.Context, id string, e ExecRequest) (int, error) {
	if len(e.Args) == 0 {
		return 0, errors.New("container exec: no command")
	}
	dir := r.dir(id)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0, fmt.Errorf("container %s: %w", id, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil || spec.Process == nil {
		return 0, fmt.Errorf("container %s: its spec: %v", id, err)
	}
	p := *spec.Process
	p.Args = e.Args
	p.Env = append(append([]string(nil), p.Env...), e.Env...)
	if e.Cwd != "" {
		p.Cwd = e.Cwd
	}
	p.Terminal = false
	out, errw := e.Stdout, e.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	logFile := filepath.Join(dir, "runc.log")
	err = r.runc(logFile).Exec(ctx, id, p, &gorunc.ExecOpts{IO: streamIO{e.Stdin, out, errw}})
	var ee *gorunc.ExitError
	if errors.As(err, &ee) {
		return ee.Status, nil
	}
	if err != nil {
		return 0, fmt.Errorf("container %s: runc exec: %w%s", id, err, runcLog(logFile))
	}
	return 0, nil
}

// streamIO hands a command's streams to runc exec (exec.Cmd copies them).
type streamIO struct {
	in       io.Reader
	out, err io.Writer
}

func (s streamIO) Close() error          { return nil }
func (s streamIO) Stdin() io.WriteCloser { return nil }
func (s streamIO) Stdout() io.ReadCloser { return nil }
func (s streamIO) Stderr() io.ReadCloser { return nil }
func (s streamIO) Set(cmd *exec.Cmd)     { cmd.Stdin, cmd.Stdout, cmd.Stderr = s.in, s.out, s.err }
