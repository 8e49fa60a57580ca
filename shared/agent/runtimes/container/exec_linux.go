package container

import (
	"context"
	"errors"

	"github.com/envlease/envlease/shared/agent/runc"
	"github.com/envlease/envlease/shared/agent/runtimes"
)

// Exec runs a command inside the container (runtimes.Execer) with runc
// exec: the container's process's user, capabilities, limits, cgroup and
// namespaces, its variables and working folder.
func (h *handle) Exec(ctx context.Context, spec runtimes.ExecSpec) (*runtimes.ExecProcess, error) {
	if h.ctr == nil {
		return nil, errors.New("the container has not been created")
	}
	select {
	case <-h.ctr.Done():
		return nil, errors.New("the container's process has ended")
	default:
	}
	x, err := runtimes.NewExecIO(spec)
	if err != nil {
		return nil, err
	}
	var term *runc.Terminal
	if spec.TTY {
		term = &runc.Terminal{Rows: spec.Rows, Cols: spec.Cols}
	}
	// The command lives as long as it runs, not as long as the request
	// that started it.
	p, err := h.r.rc.ExecStart(context.WithoutCancel(ctx), h.id, runc.ExecRequest{Args: spec.Args, Env: spec.TermEnv(nil),
		Stdin: x.Stdin, Stdout: x.Stdout, Stderr: x.Stderr}, term, x.SysProcAttr)
	if err != nil {
		x.Close()
		return nil, err
	}
	x.Started()
	return &runtimes.ExecProcess{
		Wait: func() (int, error) {
			code, err := p.Wait()
			x.Finish()
			return code, err
		},
		Resize: x.Resize,
		Signal: p.Signal,
	}, nil
}
