package agent

import (
	"context"
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// RuntimeProcess is the runtime every node offers: the template's command
// as a local process (process_runtime.go). An empty runtime means process
// too.
const RuntimeProcess = domain.RuntimeProcess

// proc is one started process of a template: its own process group, its
// box (root folder, user, cgroup), the ports its exports were given.
type proc struct {
	cmd   *exec.Cmd
	box   *box
	root  string
	ports map[string]int // export service -> port
	tail  *tailBuffer
	logs  *os.File
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
	net *envNet
	how string
}

// portEnv is the environment variable that carries an export's port:
// EXPORT_<SERVICE>_PORT, the service upper-cased with anything but letters
// and digits as '_'.
func portEnv(service string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(service) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return "EXPORT_" + b.String() + "_PORT"
}

// workdirIn places a template's workdir under root: a relative one inside
// it, an absolute one too (/workspace -> <root>/workspace), never outside.
func workdirIn(root, workdir string) (string, error) {
	for _, part := range strings.FieldsFunc(workdir, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return "", fmt.Errorf("workdir %q leaves the environment's folder", workdir)
		}
	}
	return filepath.Join(root, filepath.Clean("/"+workdir)), nil
}

// startProcess starts t's command in the box. In namespaces of its own (as
// root) each export gets the template's port as is, its network namespace
// being its alone; otherwise the template's port when the node has it free,
// else another free port of the node (two environments of one template on
// one node cannot share one). The port is passed as PORT (the first export
// by name) and EXPORT_<SERVICE>_PORT. The process gets only the environment
// processEnv lists, runs as the box's user, in its cgroup, and its own
// process group.
func (a *Agent) startProcess(t domain.Template, b *box) (*proc, error) {
	if rt := t.Runtime; rt != "" && rt != RuntimeProcess {
		return nil, fmt.Errorf("runtime %q is not supported by this agent: it runs only runtime %q (the template's command as a local process)", rt, RuntimeProcess)
	}
	if len(t.Command) == 0 {
		return nil, errors.New("the template has no command to run")
	}
	dir, err := workdirIn(b.root, t.Workdir)
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(b.root, dir)
	if err := b.mkdirIn(filepath.ToSlash(rel)); err != nil {
		return nil, fmt.Errorf("create the workdir: %w", err)
	}
	services := make([]string, 0, len(t.Exports))
	for s := range t.Exports {
		services = append(services, s)
	}
	sort.Strings(services)
	ports := map[string]int{}
	release := func() {
		if !a.namespaces {
			a.ports.release(ports)
		}
	}
	if a.namespaces {
		ports = namespacePorts(t, services)
	} else {
		for _, s := range services {
			p, err := a.ports.take(t.Exports[s].Port)
			if err != nil {
				release()
				return nil, err
			}
			ports[s] = p
		}
	}
	// An egress environment's proxy: only where its network is its own.
	proxy := 0
	if a.namespaces && t.Egress() {
		proxy = egressPort(ports)
	}
	env := a.processEnv(t, b, services, ports, proxy)
	path, err := lookPath(t.Command[0], a.searchPath(b), b)
	if err != nil {
		release()
		return nil, fmt.Errorf("start %q: %w", t.Command[0], err)
	}
	logs, err := b.openLog()
	if err != nil {
		release()
		return nil, fmt.Errorf("open the log: %w", err)
	}
	// stderr goes through a pipe of the agent's rather than one of
	// exec.Cmd's, whose Wait would wait for every holder of the pipe to exit:
	// a child that left the group would keep the environment from ending.
	pr, pw, err := os.Pipe()
	if err != nil {
		logs.Close()
		release()
		return nil, err
	}
	p := &proc{box: b, root: b.root, ports: ports, tail: newTail(16 << 10), logs: logs, exited: make(chan struct{})}
	start := func(intoCgroup bool) (*exec.Cmd, error) {
		cmd := &exec.Cmd{Path: path, Args: t.Command, Dir: dir, Env: env, Stdout: logs, Stderr: pw}
		release, err := b.procAttr(cmd, intoCgroup)
		if err == nil {
			err = cmd.Start()
		}
		release()
		return cmd, err
	}
	var cmd *exec.Cmd
	if a.namespaces {
		cmd, p.net, err = a.startNamespaced(t, b, path, dir, env, logs, pw, proxy)
	} else {
		cmd, err = start(true)
	}
	if err != nil && b.cgroup != "" && !a.namespaces {
		// clone3 into a cgroup needs Linux 5.7; start it plainly and move it.
		if cmd2, err2 := start(false); err2 == nil {
			cmd, err = cmd2, nil
			if jerr := b.joinCgroup(cmd.Process.Pid); jerr != nil {
				a.log.Warn("the process runs outside its cgroup", "pid", cmd.Process.Pid, "err", jerr)
			}
		}
	}
	pw.Close()
	if err != nil {
		pr.Close()
		logs.Close()
		release()
		if a.namespaces {
			return nil, err
		}
		return nil, fmt.Errorf("start %q: %w", t.Command[0], err)
	}
	p.cmd = cmd
	if p.net == nil {
		if warns := applyResources(cmd.Process.Pid, t.Resources, a.cpuTurn()); len(warns) > 0 {
			a.log.Warn("resources not fully applied", "pid", cmd.Process.Pid, "warnings", strings.Join(warns, "; "))
		}
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(multiWriter{logs, p.tail}, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		if p.net != nil {
			p.how = p.net.ended()
		}
		// Whatever the command left behind goes with it.
		if err := b.endAll(cmd); err != nil {
			a.log.Warn("processes of the environment may be left", "root", b.root, "err", err)
		}
		// Its stderr ends once every holder is gone; one left alive (not
		// confined) must not hold the environment.
		select {
		case <-copied:
		case <-time.After(time.Second):
		}
		pr.Close()
		<-copied
		logs.Close()
		release()
		close(p.exited)
	}()
	return p, nil
}

// uid is the user the process runs as.
func (p *proc) uid() int {
	if p.box != nil && p.box.user != nil {
		return p.box.user.uid
	}
	return os.Geteuid()
}

// waitReady waits until every export's port accepts a TCP connection
// where the environment listens (Handle.Dial: at the node's address, or on
// the loopback of its network namespace), the command exits, stop is
// closed, or the ready timeout.
func (a *Agent) waitReady(ctx context.Context, h runtimes.Handle, stop <-chan struct{}) error {
	deadline := time.NewTimer(a.cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	ports := h.Ports()
	lc, _ := h.(listenerChecker)
	for {
		pending := ""
		for s, port := range ports {
			dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			c, err := h.Dial(dctx, port)
			cancel()
			if err == nil {
				c.Close()
				if lc != nil {
					err = lc.checkListener(port)
				}
			}
			if err != nil {
				pending = fmt.Sprintf("export %s (port %d)", s, port)
				break
			}
		}
		if pending == "" {
			// No exports: ready once it is up; a command that exits at once
			// is a failure, not a ready environment, so give it a moment.
			if len(ports) > 0 {
				if lc != nil {
					lc.allReady()
				}
				return nil
			}
			select {
			case <-h.Done():
				return h.Err()
			case <-time.After(50 * time.Millisecond):
				return nil
			}
		}
		select {
		case <-h.Done():
			return h.Err()
		case <-stop:
			return errStopped
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			at := a.cfg.Address
			if h.Namespaced() {
				at = "the loopback of its network namespace"
			}
			return fmt.Errorf("not ready within %s: %s never accepted a connection at %s", a.cfg.ReadyTimeout, pending, at)
		case <-tick.C:
		}
	}
}

var errStopped = errors.New("stop requested")

// namespacePorts gives each export the template's port; one without (0)
// gets the first port from 8000 no other export of the template names, as
// any port is free in a namespace of the environment's own.
func namespacePorts(t domain.Template, services []string) map[string]int {
	ports := map[string]int{}
	taken := map[int]bool{}
	for _, s := range services {
		if p := t.Exports[s].Port; p > 0 && p < 65536 {
			ports[s] = p
			taken[p] = true
		}
	}
	next := 8000
	for _, s := range services {
		if _, ok := ports[s]; ok {
			continue
		}
		for taken[next] {
			next++
		}
		ports[s], taken[next] = next, true
	}
	return ports
}

// exitError describes how the process ended, with the last lines of stderr.
func (p *proc) exitError() error {
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
	if tail := p.tail.lastLines(20); tail != "" {
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
	killGroup(p.cmd, false)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		killGroup(p.cmd, true)
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

// withAnyPorts is t with no preferred export ports, so each export gets a
// port the node picks.
func withAnyPorts(t domain.Template) domain.Template {
	ex := make(map[string]domain.Export, len(t.Exports))
	for s, e := range t.Exports {
		e.Port = 0
		ex[s] = e
	}
	t.Exports = ex
	return t
}

// portPool hands out free TCP ports of the node, never one the agent
// already gave an environment: the preferred one when it is free.
type portPool struct {
	mu    sync.Mutex
	inUse map[int]bool
	// lowest is the lowest port an environment can bind: a template's port
	// below it is not used.
	lowest int
}

func (pp *portPool) take(preferred int) (int, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.inUse == nil {
		pp.inUse = map[int]bool{}
	}
	if preferred > 0 && preferred >= pp.lowest && preferred < 65536 && !pp.inUse[preferred] {
		if ln, err := net.Listen("tcp", ":"+strconv.Itoa(preferred)); err == nil {
			ln.Close()
			pp.inUse[preferred] = true
			return preferred, nil
		}
	}
	for i := 0; i < 20; i++ {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !pp.inUse[port] {
			pp.inUse[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free port: none found")
}

func (pp *portPool) release(ports map[string]int) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, p := range ports {
		delete(pp.inUse, p)
	}
}

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTail(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.n {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// multiWriter writes to every writer; a failing log file does not stop the tail.
type multiWriter []interface{ Write([]byte) (int, error) }

func (m multiWriter) Write(b []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(b)
	}
	return len(b), nil
}
