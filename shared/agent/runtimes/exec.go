package runtimes

import (
	"context"
	"io"
	"strings"
	"syscall"
)

// Execer is the part of a Handle that runs a command inside a running
// environment (envlease exec, envlease shell): in its namespaces, as its
// user, in its folder, cgroup and limits.
type Execer interface {
	// Exec starts spec's command and returns once it runs.
	Exec(ctx context.Context, spec ExecSpec) (*ExecProcess, error)
}

// ExecSpec is one command to run inside an environment.
type ExecSpec struct {
	Args []string
	// TTY runs it in a pseudo-terminal of Rows x Cols, made the
	// command's controlling terminal: Stdout then gets all it writes,
	// and a Ctrl-C byte on Stdin is SIGINT for its foreground group.
	TTY        bool
	Rows, Cols uint16
	// Term is TERM with a terminal ("" for xterm-256color).
	Term string
	// Stdin's end is the command's end of input (nil: none). Stdout and
	// Stderr get its output (nil: discarded).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// TermEnv sets TERM in env for spec's terminal (env as is without one).
func (spec ExecSpec) TermEnv(env []string) []string {
	if !spec.TTY {
		return env
	}
	term := spec.Term
	if term == "" || len(term) > 64 || strings.ContainsAny(term, "=\x00") {
		term = "xterm-256color"
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TERM=") {
			out = append(out, kv)
		}
	}
	return append(out, "TERM="+term)
}

// ExecProcess is a command started by Exec.
type ExecProcess struct {
	// Wait returns its exit code (128 + the signal that ended it) once it
	// has exited and its output has been written.
	Wait func() (int, error)
	// Resize sets the terminal's size (TTY only; otherwise a no-op).
	Resize func(rows, cols uint16) error
	// Signal sends sig to it.
	Signal func(sig syscall.Signal) error
}
