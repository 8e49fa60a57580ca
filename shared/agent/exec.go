package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"

	"github.com/hashicorp/yamux"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/execsession"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// DefaultMaxExecs bounds the commands and shells one environment runs at
// once: enough for a team's shells and a CI job's commands, while each
// holds a tunnel session, pipes and goroutines of the agent's.
const DefaultMaxExecs = 32

// serveExec runs the one command of an exec ticket's session (package
// execsession) inside the environment, through its runtime's Handle: the
// agent neither knows nor cares which runtime that is.
func (a *Agent) serveExec(ctx context.Context, sess *yamux.Session, c ticket.Claims, log *slog.Logger) {
	execsession.Serve(ctx, sess, func(ctx context.Context, req execsession.Hello, stdio execsession.Stdio) (execsession.Process, error) {
		return a.startExec(ctx, c, req, stdio)
	}, log)
}

func (a *Agent) startExec(ctx context.Context, c ticket.Claims, req execsession.Hello, stdio execsession.Stdio) (execsession.Process, error) {
	// The ticket names the one command the API recorded.
	if len(req.Command) == 0 || ticket.CommandDigest(req.Command) != c.Command {
		return nil, errors.New("the command is not the one the ticket was issued for; ask the API for a ticket for it")
	}
	if _, ok := a.readyTargets(c.Env); !ok {
		return nil, errors.New("environment " + c.Env + " no longer runs on this node")
	}
	r := a.env(c.Env)
	if r == nil {
		return nil, confine.ErrEnded
	}
	hp := r.h.Load()
	if hp == nil {
		return nil, confine.ErrEnded
	}
	// Each session holds descriptors and goroutines of the agent's: an
	// environment has at most MaxExecs at once.
	if r.execs.Add(1) > int64(a.cfg.MaxExecs) {
		r.execs.Add(-1)
		return nil, fmt.Errorf("environment %s runs %d commands and shells already (agent limit); end one first", c.Env, a.cfg.MaxExecs)
	}
	p, err := (*hp).Exec(ctx, runtimes.ExecSpec{Args: req.Command, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols, Term: req.Term,
		Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr})
	if err != nil {
		r.execs.Add(-1)
		return nil, err
	}
	var once sync.Once
	if r.m != nil {
		r.m.act.ExecOpened(a.now())
	}
	return execProcess{p: p, ended: func() {
		once.Do(func() {
			r.execs.Add(-1)
			if r.m != nil {
				r.m.act.ExecClosed(a.now())
			}
		})
	}}, nil
}

// execProcess is a runtime's ExecProcess as a session serves it; ended
// frees its slot once it ended.
type execProcess struct {
	p     *runtimes.ExecProcess
	ended func()
}

func (e execProcess) Wait() (int, error) {
	defer e.ended()
	return e.p.Wait()
}
func (e execProcess) Resize(s execsession.Size) error { return e.p.Resize(s.Rows, s.Cols) }
func (e execProcess) Signal(sig syscall.Signal) error { return e.p.Signal(sig) }
