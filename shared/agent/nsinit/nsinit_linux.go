//go:build linux

package nsinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// marker is argv[0] of a process that is an environment's init.
const marker = "envlease-nsinit"

// Config is what the init runs: the command (Path resolved already, Args
// with argv[0]), its folder and environment, and the confinement it is
// started under.
type Config struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
	// UID and GID the command runs as (no supplementary groups); -1 keeps
	// root (probe and tests only).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Rlimits and CPUs (its CPU affinity) are the command's from its first
	// instruction: set on the process that then execs it.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	CPUs    []int    `json:"cpus,omitempty"`
	// Terminal: fd 0 is a terminal, which the command makes its
	// controlling one in a session of its own (an exec's shell, whose job
	// control then stays inside the environment's PID namespace).
	Terminal bool `json:"terminal,omitempty"`
	// Tmp cover the folders of the node any user writes to (/tmp,
	// /var/tmp, /dev/shm...) with ones of the environment's own: its writes
	// there are bounded and go with it, and it sees nothing another left.
	// Without, /dev/shm alone gets a tmpfs of its own.
	Tmp []TmpMount `json:"tmp,omitempty"`
	// Keep are folders of the node given to the environment (its own, its
	// build cache), kept reachable at their paths when a Tmp mount covers a
	// folder they are in (a node's work dir in /tmp).
	Keep []string `json:"keep,omitempty"`
	// View makes the environment look like its template from inside: a
	// name for its user, its workdir at the template's path (view_linux.go).
	View *View `json:"view,omitempty"`
	// Probe sets the namespaces up and exits 0 without running anything.
	Probe bool `json:"probe,omitempty"`
}

// TmpMount covers Path (when the node has such a folder) with Source, a
// folder bound there, or else a tmpfs with Options (size=...,nr_inodes=...).
type TmpMount struct {
	Path    string `json:"path"`
	Source  string `json:"source,omitempty"`
	Options string `json:"options,omitempty"`
}

// Rlimit is one resource limit, as prlimit(2) takes it.
type Rlimit struct {
	Resource int    `json:"resource"`
	Max      uint64 `json:"max"`
}

// report is one line the init writes to the agent.
type report struct {
	Started  bool     `json:"started,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
	// Status is the command's wait status once it ended.
	Status *uint32 `json:"status,omitempty"`
}

func init() {
	if len(os.Args) > 0 {
		switch os.Args[0] {
		case marker:
			os.Exit(run())
		case execMarker:
			os.Exit(execCommand())
		}
	}
}

// Fds of the init and of the stage that becomes the command: 3 reads the
// Config, 4 writes reports; the init's 5 is the agent's socket (ctlFd).
const (
	configFd = 3
	reportFd = 4
)

func run() int {
	// This thread starts every command and is the one that waits for
	// children: spawn sets what they inherit on it and traces them.
	runtime.LockOSThread()
	syscall.CloseOnExec(configFd)
	syscall.CloseOnExec(reportFd)
	syscall.CloseOnExec(ctlFd)
	out := os.NewFile(reportFd, "reports")
	say := func(r report) {
		b, _ := json.Marshal(r)
		_, _ = out.Write(append(b, '\n'))
	}
	fail := func(format string, a ...any) int {
		say(report{Error: fmt.Sprintf(format, a...)})
		return 127
	}
	var cfg Config
	if err := json.NewDecoder(os.NewFile(configFd, "config")).Decode(&cfg); err != nil {
		return fail("environment init: read its configuration: %v", err)
	}
	if os.Getpid() != 1 {
		return fail("environment init: not the first process of a PID namespace")
	}
	// Mounts made here must not reach the node's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("environment init: make mounts private: %v", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail("environment init: mount /proc: %v", err)
	}
	if lo, err := netlink.LinkByName("lo"); err != nil {
		return fail("environment init: find lo: %v", err)
	} else if err := netlink.LinkSetUp(lo); err != nil {
		return fail("environment init: bring lo up: %v", err)
	}
	var warns []string
	// POSIX shared memory of its own, with System V IPC (its IPC
	// namespace), and a /tmp of its own (Config.Tmp).
	if err := coverTmp(cfg); err != nil {
		if len(cfg.Tmp) > 0 {
			// Asked for: the environment does not run on the node's.
			return fail("environment init: %v", err)
		}
		warns = append(warns, err.Error())
	}
	// The namespace's ports are the environment's alone: its user may bind
	// any of them, as a template's port below 1024 asks.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0"), 0); err != nil {
		warns = append(warns, fmt.Sprintf("ports below 1024 stay privileged: %v", err))
	}
	warns = append(warns, applyView(cfg)...)
	if cfg.Probe {
		say(report{Started: true, Warnings: warns})
		return 0
	}

	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs)
	pid, more, early, err := spawn(cfg, []uintptr{0, 1, 2})
	if err != nil {
		return fail("%v", err)
	}
	warns = append(warns, more...)
	say(report{Started: true, Warnings: warns})
	execs := &execTable{m: map[int]*net.UnixConn{}}
	reqs := make(chan execRequest)
	if f := os.NewFile(ctlFd, "agent"); f != nil {
		if c, err := net.FileConn(f); err == nil {
			if ctl, ok := c.(*net.UnixConn); ok {
				go listenExecs(ctl, reqs)
			} else {
				c.Close()
			}
		}
		f.Close()
	}
	// ended says how the template's command ended, and so ends the init.
	ended := func(ws unix.WaitStatus) int {
		st := uint32(ws)
		say(report{Status: &st})
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
		return 1
	}
	if early != nil {
		return ended(*early)
	}

	// A SIGCHLD the full channel dropped is made up for by the tick.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var s syscall.Signal
		select {
		case req := <-reqs:
			execs.runExec(req)
			continue
		case sig := <-sigs:
			s, _ = sig.(syscall.Signal)
		case <-tick.C:
			s = syscall.SIGCHLD
		}
		if s != syscall.SIGCHLD {
			if s == syscall.SIGURG || s == syscall.SIGPIPE || s == syscall.SIGWINCH {
				continue // the Go runtime's own, or nothing the command asked for
			}
			// The agent signals the init's group; the command has a group
			// of its own, which a stop reaches the way it did outside.
			if unix.Kill(-pid, s) != nil {
				_ = unix.Kill(pid, s)
			}
			continue
		}
		for {
			got, ws, err := execs.reap()
			if err != nil || got <= 0 {
				break
			}
			if got == pid {
				return ended(ws)
			}
		}
	}
}

// Cmd is an init about to start: Start it, then Begin.
type Cmd struct {
	*exec.Cmd
	pipes
	lines *bufio.Reader
	// done is closed once the reports are read to their end; status is
	// then the command's wait status, if the init sent one.
	done   chan struct{}
	status *uint32
	began  bool
}

// Command prepares an init that runs cfg in new network, PID, mount and IPC
// namespaces (System V IPC and POSIX message queues are the environment's
// own), in its own process group. The caller sets Stdout, Stderr,
// Env (of the init itself) and may add to SysProcAttr before Start.
func Command(cfg Config) (*Cmd, error) {
	p, err := newPipes(cfg)
	if err != nil {
		return nil, err
	}
	c := &Cmd{
		Cmd: &exec.Cmd{
			Path: "/proc/self/exe", Args: []string{marker},
			ExtraFiles:  p.childFiles(),
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC},
		},
		pipes: p, lines: bufio.NewReader(p.repR), done: make(chan struct{}),
	}
	return c, nil
}

// pipes carry the init's configuration in and its reports out, and the
// agent's requests to run commands (Exec).
type pipes struct {
	cfg            Config
	cfgW, repR     *os.File
	childR, childW *os.File
	ctl            *net.UnixConn
	childCtl       *os.File
}

func newPipes(cfg Config) (pipes, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return pipes{}, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return pipes{}, err
	}
	p := pipes{cfg: cfg, cfgW: cfgW, repR: repR, childR: cfgR, childW: repW}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		p.Close()
		return pipes{}, err
	}
	mine := os.NewFile(uintptr(fds[0]), "init")
	c, err := net.FileConn(mine)
	mine.Close()
	p.childCtl = os.NewFile(uintptr(fds[1]), "agent")
	if err != nil {
		p.Close()
		return pipes{}, err
	}
	p.ctl = c.(*net.UnixConn)
	return p, nil
}

// childFiles are the init's ends, its descriptors 3, 4 and 5.
func (p *pipes) childFiles() []*os.File { return []*os.File{p.childR, p.childW, p.childCtl} }

// Close releases the pipes of a command that did not start.
func (p *pipes) Close() {
	for _, f := range []*os.File{p.cfgW, p.repR, p.childR, p.childW, p.childCtl} {
		if f != nil {
			f.Close()
		}
	}
	if p.ctl != nil {
		p.ctl.Close()
	}
}

// send, once the init started, drops the parent's copies of its ends and
// hands it the configuration.
func (p *pipes) send() error {
	p.childR.Close()
	p.childW.Close()
	p.childCtl.Close()
	err := json.NewEncoder(p.cfgW).Encode(p.cfg)
	p.cfgW.Close()
	return err
}

// Begin, once the init started (and is where it belongs, its cgroup),
// hands it the configuration and waits until the command started: it
// returns the warnings of what the init could not apply, or why the
// command did not start.
func (c *Cmd) Begin() ([]string, error) {
	if err := c.send(); err != nil {
		return nil, fmt.Errorf("environment init: %w", err)
	}
	var r report
	if err := c.read(&r); err != nil {
		return nil, fmt.Errorf("environment init ended before the command started: %w", err)
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	c.began = true
	go func() {
		defer close(c.done)
		defer c.repR.Close()
		// The init has ended: no command runs through it any more.
		defer c.ctl.Close()
		var r report
		for c.read(&r) == nil {
			if r.Status != nil {
				c.status = r.Status
			}
		}
	}()
	return r.Warnings, nil
}

func (c *Cmd) read(r *report) error {
	line, err := c.lines.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("no report")
		}
		return err
	}
	*r = report{}
	return json.Unmarshal(line, r)
}

// Status is the command's wait status, when the init reported one. Call it
// after Wait of a command that began: the init has exited, so the reports
// end at once (every process of its namespace went with it).
func (c *Cmd) Status() (syscall.WaitStatus, bool) {
	if !c.began {
		return 0, false
	}
	<-c.done
	if c.status == nil {
		return 0, false
	}
	return syscall.WaitStatus(*c.status), true
}

// Probe starts an init that only sets up its namespaces, and says whether
// this node can run environments in namespaces of their own.
func Probe() error {
	c, err := Command(Config{Probe: true, UID: -1, GID: -1})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		c.Close()
		return err
	}
	_, berr := c.Begin()
	werr := c.Wait()
	return errors.Join(berr, werr)
}

// coverTmp mounts cfg.Tmp (by default a tmpfs of its own over /dev/shm).
// The sources and the folders to keep are opened first and mounted by
// descriptor, so that a mount over a folder they are in does not hide
// them; a folder kept is then bound back at its path inside a mount that
// covered it.
func coverTmp(cfg Config) error {
	tmp := cfg.Tmp
	if len(tmp) == 0 {
		tmp = []TmpMount{{Path: "/dev/shm"}}
	}
	open := func(p string) (int, error) {
		return unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	src := make([]int, len(tmp))
	for i, m := range tmp {
		src[i] = -1
		if m.Source != "" {
			fd, err := open(m.Source)
			if err != nil {
				return fmt.Errorf("a %s of its own: %s: %v", m.Path, m.Source, err)
			}
			defer unix.Close(fd)
			src[i] = fd
		}
	}
	keep := make([]int, len(cfg.Keep))
	for i, p := range cfg.Keep {
		fd, err := open(p)
		if err != nil {
			return fmt.Errorf("the environment's folder %s: %v", p, err)
		}
		defer unix.Close(fd)
		keep[i] = fd
	}
	for i, m := range tmp {
		if st, err := os.Lstat(m.Path); err != nil || !st.IsDir() {
			continue
		}
		var err error
		if src[i] >= 0 {
			err = unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src[i]), m.Path, "", unix.MS_BIND, "")
		} else {
			opts := "mode=1777"
			if m.Options != "" {
				opts += "," + m.Options
			}
			err = unix.Mount("tmpfs", m.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
		}
		if err != nil {
			return fmt.Errorf("a %s of its own: %v", m.Path, err)
		}
		for j, p := range cfg.Keep {
			if !strings.HasPrefix(p, strings.TrimSuffix(m.Path, "/")+"/") {
				continue
			}
			if err := os.MkdirAll(p, 0o711); err != nil {
				return fmt.Errorf("keep %s under %s: %v", p, m.Path, err)
			}
			if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", keep[j]), p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("keep %s under %s: %v", p, m.Path, err)
			}
		}
	}
	return nil
}
