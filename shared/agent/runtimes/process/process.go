package process

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// proc is one started process of a template: its own process group, its
// box (root folder, user, cgroup), the ports its exports were given.
type proc struct {
	cmd   *exec.Cmd
	box   *confine.Box
	root  string
	ports map[string]int // export service -> port
	tail  *runtimes.Tail
	logs  io.WriteCloser
	// exited is closed when the process has been waited for; err is then
	// Wait's result.
	exited chan struct{}
	err    error
	// foreign is set when, while it started, another program was found
	// listening on one of its ports: it lost the race for that port.
	// verified is set once every export's port was seen held by this
	// process: a warm process handed to a lease need not be looked up in
	// /proc again (which costs tens of milliseconds on a busy host).
	verified atomic.Bool
	foreign  atomic.Bool
	// net is the environment's network namespace when it runs in
	// namespaces of its own (the agent is root), nil otherwise; how says
	// how its command ended, as its init told.
	net *confine.Net
	how string
}

// startProcess starts t's command in the box. In namespaces of its own (as
// root) each export gets the template's port as is, its network namespace
// being its alone; otherwise the template's port when the node has it free,
// else another free port of the node (two environments of one template on
// one node cannot share one). The port is passed as PORT (the first export
// by name) and EXPORT_<SERVICE>_PORT. The process gets only the environment
// processEnv lists, runs as the box's user, in its cgroup, and its own
// process group.
func (rt *Runtime) startProcess(t domain.Template, b *confine.Box, cache string, out io.Writer) (*proc, error) {
	if name := t.Runtime; name != "" && name != domain.RuntimeProcess {
		return nil, fmt.Errorf("runtime %q is not supported by this agent: it runs only runtime %q (the template's command as a local process)", name, domain.RuntimeProcess)
	}
	if len(t.Command) == 0 {
		return nil, errors.New("the template has no command to run")
	}
	dir, err := runtimes.WorkdirIn(b.Root, t.Workdir)
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(b.Root, dir)
	if err := b.MkdirIn(filepath.ToSlash(rel)); err != nil {
		return nil, fmt.Errorf("create the workdir: %w", err)
	}
	services := make([]string, 0, len(t.Exports))
	for s := range t.Exports {
		services = append(services, s)
	}
	sort.Strings(services)
	ports := map[string]int{}
	release := func() {
		if !rt.cfg.Node.Namespaces {
			rt.ports.release(ports)
		}
	}
	if rt.cfg.Node.Namespaces {
		ports = runtimes.NamespacePorts(t, services)
	} else {
		for _, s := range services {
			p, err := rt.ports.take(t.Exports[s].Port)
			if err != nil {
				release()
				return nil, err
			}
			ports[s] = p
		}
	}
	// An egress environment's proxy: only where its network is its own.
	proxy := 0
	if rt.cfg.Node.Proxied(t) {
		proxy = confine.EgressPortFor(ports)
	}
	env := rt.processEnv(t, b, services, ports, proxy, cache)
	path, err := lookPath(t.Command[0], rt.searchPath(b), b)
	if err != nil {
		release()
		return nil, fmt.Errorf("start %q: %w", t.Command[0], err)
	}
	logs, err := b.OpenLog(0)
	if err != nil {
		release()
		return nil, fmt.Errorf("open the log: %w", err)
	}
	// stdout and stderr go through pipes of the agent's rather than ones of
	// exec.Cmd's, whose Wait would wait for every holder of the pipe to exit:
	// a child that left the group would keep the environment from ending.
	// The agent copies them to the folder's log and to out.
	pr, pw, err := os.Pipe()
	if err != nil {
		logs.Close()
		release()
		return nil, err
	}
	or, ow, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		logs.Close()
		release()
		return nil, err
	}
	p := &proc{box: b, root: b.Root, ports: ports, tail: runtimes.NewTail(16 << 10), logs: logs, exited: make(chan struct{})}
	start := func(intoCgroup bool) (*exec.Cmd, error) {
		cmd := &exec.Cmd{Path: path, Args: t.Command, Dir: dir, Env: env, Stdout: ow, Stderr: pw}
		release, err := b.ProcAttr(cmd, intoCgroup)
		if err == nil {
			err = cmd.Start()
		}
		release()
		return cmd, err
	}
	var cmd *exec.Cmd
	if rt.cfg.Node.Namespaces {
		cmd, p.net, err = rt.startNamespaced(t, b, cache, path, dir, env, ow, pw, proxy)
	} else {
		cmd, err = start(true)
	}
	if err != nil && b.Cgroup != "" && !rt.cfg.Node.Namespaces {
		// clone3 into a cgroup needs Linux 5.7; start it plainly and move it.
		if cmd2, err2 := start(false); err2 == nil {
			cmd, err = cmd2, nil
			if jerr := b.JoinCgroup(cmd.Process.Pid); jerr != nil {
				rt.cfg.Log.Warn("the process runs outside its cgroup", "pid", cmd.Process.Pid, "err", jerr)
			}
		}
	}
	pw.Close()
	ow.Close()
	if err != nil {
		pr.Close()
		or.Close()
		logs.Close()
		release()
		if rt.cfg.Node.Namespaces {
			return nil, err
		}
		return nil, fmt.Errorf("start %q: %w", t.Command[0], err)
	}
	p.cmd = cmd
	if p.net == nil {
		if warns := applyResources(cmd.Process.Pid, t.Resources, rt.cpuTurn()); len(warns) > 0 {
			rt.cfg.Log.Warn("resources not fully applied", "pid", cmd.Process.Pid, "warnings", strings.Join(warns, "; "))
		}
	}
	copied, copiedOut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(multiWriter{logs, p.tail, out}, pr)
	}()
	go func() {
		defer close(copiedOut)
		_, _ = io.Copy(multiWriter{logs, out}, or)
	}()
	go func() {
		p.err = cmd.Wait()
		if p.net != nil {
			p.how = p.net.Ended()
		}
		// Whatever the command left behind goes with it.
		if err := b.EndAll(cmd); err != nil {
			rt.cfg.Log.Warn("processes of the environment may be left", "root", b.Root, "err", err)
		}
		// Its stderr ends once every holder is gone; one left alive (not
		// confined) must not hold the environment.
		outputs := time.After(time.Second)
		select {
		case <-copied:
		case <-outputs:
		}
		select {
		case <-copiedOut:
		case <-outputs:
		}
		pr.Close()
		or.Close()
		<-copied
		<-copiedOut
		logs.Close()
		release()
		close(p.exited)
	}()
	return p, nil
}

// uid is the user the process runs as.
func (p *proc) uid() int { return p.box.UID() }

// exitError describes how the process ended, whether it ran out of disk
// (full says how, "" when it did not), with the last lines of stderr.
func (p *proc) exitError(full string) error {
	<-p.exited
	how := "process exited with status 0"
	var ee *exec.ExitError
	switch {
	case p.how != "":
		how = "process " + p.how
	case errors.As(p.err, &ee):
		how = "process " + exitDescription(ee)
	case p.err != nil:
		how = "process ended: " + p.err.Error()
	}
	if full != "" {
		how += "; " + runtimes.OutOfDisk(full)
	}
	if tail := p.tail.LastLines(20); tail != "" {
		how += "; last lines of stderr:\n" + tail
	}
	return errors.New(how)
}

// terminate sends SIGTERM to the process group, waits up to grace, then
// SIGKILL, and waits for the process to be gone.
func (p *proc) terminate(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	confine.KillGroup(p.cmd, false)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		confine.KillGroup(p.cmd, true)
		<-p.exited
	}
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// lostPortRace reports whether the process ended before it was ready while
// a template port it was given was held by another program (seen listening
// there while it started, or holding it now): the port was free when the
// agent chose it and taken before the command bound it.
func (p *proc) lostPortRace(t domain.Template) bool {
	if p.net != nil {
		return false // the namespace's ports are its own
	}
	select {
	case <-p.exited:
	default:
		return false // still running: not ready for another reason
	}
	for s, port := range p.ports {
		if port != t.Exports[s].Port {
			continue
		}
		if p.foreign.Load() {
			return true
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			return true
		}
		ln.Close()
	}
	return false
}

// multiWriter writes to every writer; a failing log file does not stop the tail.
type multiWriter []interface{ Write([]byte) (int, error) }

func (m multiWriter) Write(b []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(b)
	}
	return len(b), nil
}
