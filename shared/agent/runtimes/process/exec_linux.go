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

	"golang.org/x/sys/unix"

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

// enter runs the command in the environment's namespaces.
func (h *handle) enter(spec runtimes.ExecSpec, path, dir string, env []string, x *runtimes.ExecIO) (*runtimes.ExecProcess, error) {
	b := h.b
	uid := -1
	if b.User != nil {
		uid = b.User.UID
	}
	limits, cpus, _ := resourceLimits(h.t.Resources, h.rt.cpuTurn())
	e, err := nsinit.EnterCommand(h.p.cmd.Process.Pid, nsinit.Config{Path: path, Args: spec.Args, Dir: dir, Env: env,
		UID: uid, GID: uid, Rlimits: limits, CPUs: cpus, Terminal: spec.TTY, View: view(h.t, b)})
	if err != nil {
		x.Close()
		return nil, err
	}
	// A terminal is the command's own, in a session of its own inside
	// the namespace (Config.Terminal), not nsenter's.
	e.Stdin, e.Stdout, e.Stderr = x.Stdin, x.Stdout, x.Stderr
	// In the environment's cgroup from nsenter's first instruction, so
	// the command is too.
	if b.Cgroup != "" {
		fd, err := unix.Open(b.Cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			e.Close()
			x.Close()
			return nil, err
		}
		defer unix.Close(fd)
		e.SysProcAttr.UseCgroupFD, e.SysProcAttr.CgroupFD = true, fd
	}
	if err := e.Start(); err != nil {
		e.Close()
		x.Close()
		return nil, fmt.Errorf("start %q in the environment: %w", spec.Args[0], err)
	}
	x.Started()
	if _, err := e.Begin(); err != nil {
		_ = e.Process.Kill()
		_ = e.Wait()
		x.Close()
		return nil, err
	}
	// nsenter passes no signal on: they go to the command, its child.
	child := e.Child()
	signal := func(sig syscall.Signal) error {
		if child > 0 {
			return syscall.Kill(child, sig)
		}
		return syscall.Kill(-e.Process.Pid, sig)
	}
	return execProcess(e.Cmd, x, signal), nil
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
