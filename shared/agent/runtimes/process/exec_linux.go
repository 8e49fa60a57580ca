//go:build linux

package process

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/nsinit"
	"github.com/envlease/envlease/shared/agent/runtimes"
)

// Exec runs a command inside the environment (runtimes.Execer): with the
// environment's own variables, in its working folder, as its user, in its
// cgroup and with its template's limits; in its namespaces when it has
// them (nsinit.Enter), else as a process of the node like its command.
func (h *handle) Exec(_ context.Context, spec runtimes.ExecSpec) (*runtimes.ExecProcess, error) {
	p := h.p
	if p == nil {
		return nil, errors.New("the environment has not started")
	}
	select {
	case <-p.exited:
		return nil, confine.ErrEnded
	default:
	}
	if len(spec.Args) == 0 {
		return nil, errors.New("no command")
	}
	t, b := h.t, h.b
	dir, err := runtimes.WorkdirIn(b.Root, t.Workdir)
	if err != nil {
		return nil, err
	}
	services := make([]string, 0, len(p.ports))
	for s := range p.ports {
		services = append(services, s)
	}
	sort.Strings(services)
	proxy := 0
	if p.net != nil && h.rt.cfg.Node.Proxied(t) {
		proxy = confine.EgressPortFor(p.ports)
	}
	cache := ""
	if h.cache != nil {
		cache = h.cache.Path()
	}
	env := spec.TermEnv(h.rt.processEnv(t, b, services, p.ports, proxy, cache))
	path, err := lookPath(spec.Args[0], h.rt.searchPath(b), b)
	if err != nil {
		return nil, fmt.Errorf("start %q: %w", spec.Args[0], err)
	}
	x, err := runtimes.NewExecIO(spec)
	if err != nil {
		return nil, err
	}
	if p.net != nil {
		return h.enter(spec, path, dir, env, x)
	}
	cmd := &exec.Cmd{Path: path, Args: spec.Args, Dir: dir, Env: env, Stdin: x.Stdin, Stdout: x.Stdout, Stderr: x.Stderr}
	release, err := b.ProcAttr(cmd, true)
	if err == nil {
		x.SysProcAttr(cmd.SysProcAttr)
		err = cmd.Start()
	}
	release()
	if err != nil {
		x.Close()
		return nil, fmt.Errorf("start %q: %w", spec.Args[0], err)
	}
	x.Started()
	if warns := applyResources(cmd.Process.Pid, t.Resources, h.rt.cpuTurn()); len(warns) > 0 {
		h.rt.cfg.Log.Warn("exec: resources not fully applied", "pid", cmd.Process.Pid, "warnings", strings.Join(warns, "; "))
	}
	return execProcess(cmd, x, func(sig syscall.Signal) error { return cmd.Process.Signal(sig) }), nil
}

// enter runs the command in the environment's namespaces: its init
// starts it, as a child of its own (in its namespaces and cgroup), as it
// started the template's command.
func (h *handle) enter(spec runtimes.ExecSpec, path, dir string, env []string, x *runtimes.ExecIO) (*runtimes.ExecProcess, error) {
	b := h.b
	uid := -1
	if b.User != nil {
		uid = b.User.UID
	}
	init := h.p.net.Init()
	if init == nil {
		x.Close()
		return nil, errors.New("the environment has no init to run the command")
	}
	limits, cpus, _ := resourceLimits(h.t.Resources, h.rt.cpuTurn())
	// A terminal is the command's own, in a session of its own inside the
	// namespace (Config.Terminal).
	proc, warns, err := init.Exec(nsinit.Config{Path: path, Args: spec.Args, Dir: dir, Env: env,
		UID: uid, GID: uid, Rlimits: limits, CPUs: cpus, Terminal: spec.TTY, View: view(h.t, b)}, x.Stdin, x.Stdout, x.Stderr)
	if err != nil {
		x.Close()
		return nil, err
	}
	x.Started()
	if len(warns) > 0 {
		h.rt.cfg.Log.Warn("exec: resources not fully applied", "root", b.Root, "warnings", strings.Join(warns, "; "))
	}
	var (
		once sync.Once
		code int
	)
	return &runtimes.ExecProcess{
		Wait: func() (int, error) {
			once.Do(func() {
				ws := proc.Wait()
				x.Finish()
				code = waitCode(ws)
			})
			return code, nil
		},
		Resize: x.Resize,
		Signal: proc.Signal,
	}, nil
}

// waitCode is a wait status as a shell reports it (runtimes.ExitCode).
func waitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// execProcess is a started command whose output x copies.
func execProcess(cmd *exec.Cmd, x *runtimes.ExecIO, signal func(syscall.Signal) error) *runtimes.ExecProcess {
	var (
		once sync.Once
		code int
		err  error
	)
	return &runtimes.ExecProcess{
		Wait: func() (int, error) {
			once.Do(func() {
				_ = cmd.Wait() // the status is ProcessState's
				x.Finish()
				code, err = runtimes.ExitCode(cmd.ProcessState)
			})
			return code, err
		},
		Resize: x.Resize,
		Signal: signal,
	}
}
