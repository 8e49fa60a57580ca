package runc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gorunc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runc/pinned"
)

// Options tune a Runtime.
type Options struct {
	// Runc is the runc binary (default: the pinned release's build when
	// installed, else "runc" on PATH). One without the fixes of the known
	// container escapes is refused (CheckVersion).
	Runc string
	// Dir holds one folder per environment: its state file, bundle,
	// overlay folders, root filesystem mount and logs.
	Dir string
	// CgroupParent is the cgroup, relative to the agent's own, under which
	// each container gets one of its own (default "envlease").
	CgroupParent string
	// Disks, when set, gives each container a disk of its own that holds
	// its upper folder (all it writes): Config.Disk says its size.
	Disks *confine.Disks
	Log   *slog.Logger
	Now   func() time.Time
}

// Runtime runs containers under runc.
type Runtime struct {
	opt      Options
	runcRoot string
	swap     bool
	mu       sync.Mutex
	live     map[string]*Container
}

// Exit is how a container's process ended.
type Exit struct {
	Code      int            // exit status, or 128+signal
	Signal    syscall.Signal // the signal that ended it, if one did
	OOMKilled bool           // the memory limit was hit and the kernel killed it
}

func (e Exit) String() string {
	switch {
	case e.OOMKilled:
		return fmt.Sprintf("killed: out of memory (the environment's memory limit) (exit %d)", e.Code)
	case e.Signal != 0:
		return fmt.Sprintf("killed by signal %s (exit %d)", e.Signal, e.Code)
	}
	return fmt.Sprintf("exit %d", e.Code)
}

// Container is one environment's container created by this run of the
// agent.
type Container struct {
	ID  string
	Pid int
	Dir string
	// Upper is its overlay's upper folder: all it wrote to its root
	// filesystem. Disk holds it, nil without (Options.Disks).
	Upper string
	Disk  *confine.Disk
	done  chan struct{}
	exit  Exit
	// copied is closed once its output was copied to its end.
	copied chan struct{}
}

// Done is closed when the container's process ended.
func (c *Container) Done() <-chan struct{} { return c.done }

// Exit says how it ended; valid once Done is closed.
func (c *Container) Exit() Exit { <-c.done; return c.exit }

// New makes a runtime. It makes the agent a child subreaper, as
// containerd's shim is: runc create exits once the container's process is
// made, and the process is then handed to the nearest subreaper, so the
// agent (not the node's init) sees it end and learns its exit status.
func New(opt Options) (*Runtime, error) {
	if opt.Runc == "" {
		// The project's own build of the pinned release when it is
		// installed (go run ./shared/devstack/cmd/runc), else PATH's.
		opt.Runc = pinned.Installed()
	}
	if opt.Runc == "" {
		opt.Runc = "runc"
	}
	p, err := exec.LookPath(opt.Runc)
	if err != nil {
		return nil, fmt.Errorf("container runtime: runc: %w (install the pinned runc %s: go run ./shared/devstack/cmd/runc)", err, pinned.Version)
	}
	opt.Runc = p
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("container runtime: %s --version: %w", p, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if err := CheckVersion(first); err != nil {
		return nil, fmt.Errorf("container runtime: %s: %w", p, err)
	}
	if opt.Dir == "" {
		return nil, errors.New("container runtime: no folder")
	}
	if opt.CgroupParent == "" {
		opt.CgroupParent = "envlease"
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	// 0711: a container in a user namespace reaches its root filesystem
	// through these folders (the folders above must allow it too).
	if err := os.MkdirAll(opt.Dir, 0o711); err != nil {
		return nil, err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("container runtime: become a subreaper: %w", err)
	}
	r := &Runtime{opt: opt, runcRoot: filepath.Join(opt.Dir, ".runc"), live: map[string]*Container{}}
	if dirs, err := cgroupDirs(""); err == nil {
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
				r.swap = true
			}
		}
	}
	return r, nil
}

// Version says which runc the runtime drives.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	v, err := r.runc("").Version(ctx)
	if err != nil {
		return "", err
	}
	return v.Runc, nil
}

// runc gives a client of the runtime's runc; with a log file, runc's own
// messages go there (its stderr is the container's).
func (r *Runtime) runc(logFile string) *gorunc.Runc {
	return &gorunc.Runc{Command: r.opt.Runc, Root: r.runcRoot, Log: logFile, LogFormat: gorunc.JSON}
}

func (r *Runtime) dir(id string) string { return filepath.Join(r.opt.Dir, id) }

func validID(id string) error {
	if id == "" || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("container id %q: want 1 to 64 letters, digits, - and _", id)
	}
	return nil
}

// Create prepares an environment's container from the cached image root
// filesystem lower: an overlay of lower and a fresh upper folder mounted as
// its root, the spec written from c, and runc create. Its process then
// waits for Start. On failure what was made is removed.
func (r *Runtime) Create(ctx context.Context, lower string, c Config) (ctr *Container, err error) {
	if err := validID(c.ID); err != nil {
		return nil, err
	}
	for _, p := range []string{lower, r.opt.Dir} {
		if strings.ContainsAny(p, ",:") {
			return nil, fmt.Errorf("container: %q: overlay folders cannot hold , or :", p)
		}
	}
	dir := r.dir(c.ID)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("container %s: %w", c.ID, err)
	}
	cgroupsPath := filepath.Join(r.opt.CgroupParent, c.ID)
	cgroups, err := cgroupDirs(cgroupsPath)
	if err != nil {
		return nil, err
	}
	st := &State{ID: c.ID, Phase: PhasePreparing, Rootfs: filepath.Join(dir, "rootfs"), Lower: lower,
		Cgroups: cgroups, Created: r.opt.Now()}
	if err := writeState(dir, st); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer func() {
		if err != nil {
			if derr := r.Delete(context.WithoutCancel(ctx), c.ID); derr != nil {
				r.opt.Log.Warn("container: cleaning up a failed create", "id", c.ID, "err", derr)
			}
		}
	}()
	base := dir
	var disk *confine.Disk
	if c.Disk != nil && r.opt.Disks != nil {
		// The disk's folder is in the state before the disk is made, so
		// that a restarted agent unmounts it whatever step failed.
		base = filepath.Join(dir, "disk")
		st.Disk, st.DiskImage = base, filepath.Join(r.opt.Disks.Dir, c.ID+".img")
		if err := os.Mkdir(base, 0o711); err != nil {
			return nil, err
		}
		if err := writeState(dir, st); err != nil {
			return nil, err
		}
		if disk, err = r.opt.Disks.Make(ctx, c.ID, base, *c.Disk, nil); err != nil {
			return nil, fmt.Errorf("container %s: %w", c.ID, err)
		}
		if err := os.Chmod(base, 0o711); err != nil {
			return nil, err
		}
	}
	upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{upper, work, st.Rootfs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if c.UserNS != nil {
		// The container's root owns its upper folder.
		for _, d := range []string{upper, work} {
			if err := os.Chown(d, int(c.UserNS.HostID), int(c.UserNS.HostID)); err != nil {
				return nil, err
			}
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", st.Rootfs, "overlay", unix.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("container %s: mount the root filesystem: %w", c.ID, err)
	}
	c.Rootfs = st.Rootfs
	c.CgroupsPath = cgroupsPath
	c.SwapAccounting = r.swap
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && (c.MaxOpenFiles == 0 && lim.Max < 65536 || lim.Max < c.MaxOpenFiles) {
		c.MaxOpenFiles = lim.Max
	}
	// Folders made for the container belong to its process's user.
	owner := [2]int{int(c.UID), int(c.GID)}
	if c.UserNS != nil {
		owner[0] += int(c.UserNS.HostID)
		owner[1] += int(c.UserNS.HostID)
	}
	if c.ReadOnly {
		if err := makeWritable(st.Rootfs, c.Writable, owner); err != nil {
			return nil, fmt.Errorf("container %s: %w", c.ID, err)
		}
	}
	if err := makeTmp(st.Rootfs, owner[0]-int(c.UID), owner[1]-int(c.GID)); err != nil {
		return nil, fmt.Errorf("container %s: /tmp: %w", c.ID, err)
	}
	if c.Cwd != "" {
		if err := makeDir(st.Rootfs, c.Cwd, owner); err != nil {
			return nil, fmt.Errorf("container %s: working folder: %w", c.ID, err)
		}
	}
	spec, err := Spec(c)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return nil, err
	}
	// The container writes its output to pipes, which the runtime copies
	// to capped files of its folder (stdout.log, stderr.log: the last
	// Config.OutputMax bytes each) and to Config.Stdout and Stderr. The
	// pipes end with the agent: a restarted agent removes the container.
	outs, err := newOutputs(dir, c.OutputMax, c.Stdout, c.Stderr)
	if err != nil {
		return nil, err
	}
	pidFile := filepath.Join(dir, "pid")
	logFile := filepath.Join(dir, "runc.log")
	err = r.runc(logFile).Create(ctx, c.ID, dir, &gorunc.CreateOpts{PidFile: pidFile, IO: fileIO{outs.w[0], outs.w[1]}})
	outs.started()
	if err != nil {
		outs.wait(0)
		return nil, fmt.Errorf("container %s: runc create: %w%s", c.ID, err, runcLog(logFile))
	}
	pid, err := readPid(pidFile)
	if err != nil {
		return nil, err
	}
	st.Phase, st.Pid = PhaseCreated, pid
	if err := writeState(dir, st); err != nil {
		return nil, err
	}
	ctr = &Container{ID: c.ID, Pid: pid, Dir: dir, Upper: upper, Disk: disk, done: make(chan struct{}), copied: outs.done}
	r.mu.Lock()
	r.live[c.ID] = ctr
	r.mu.Unlock()
	go r.wait(ctr, cgroups, outs)
	return ctr, nil
}

// wait reaps the container's process (the agent's child since runc create
// exited) and records how it ended.
func (r *Runtime) wait(c *Container, cgroups []string, outs *outputs) {
	defer close(c.done)
	// Done means its output is copied too, up to a second after it ended
	// (a process it left holding the pipes does not hold it).
	defer outs.wait(time.Second)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(c.Pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// Not our child (the agent is no subreaper after all): wait
			// for it to go.
			for unix.Kill(c.Pid, 0) == nil {
				time.Sleep(50 * time.Millisecond)
			}
			c.exit = Exit{Code: -1}
			return
		}
		break
	}
	switch {
	case ws.Signaled():
		c.exit = Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	default:
		c.exit = Exit{Code: ws.ExitStatus()}
	}
	c.exit.OOMKilled = oomKilled(cgroups)
	r.opt.Log.Info("container: ended", "id", c.ID, "exit", c.exit.String())
}

// Start starts a created container's process.
func (r *Runtime) Start(ctx context.Context, id string) error {
	dir := r.dir(id)
	st, err := readState(dir)
	if err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	logFile := filepath.Join(dir, "runc.log")
	if err := r.runc(logFile).Start(ctx, id); err != nil {
		return fmt.Errorf("container %s: runc start: %w%s", id, err, runcLog(logFile))
	}
	st.Phase = PhaseRunning
	return writeState(dir, st)
}

// Lookup gives a container this run of the agent created.
func (r *Runtime) Lookup(id string) (*Container, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.live[id]
	return c, ok
}

// State asks runc for a container's state (created, running, stopped,
// paused).
func (r *Runtime) State(ctx context.Context, id string) (*gorunc.Container, error) {
	return r.runc("").State(ctx, id)
}

// Kill sends sig to every process of the container.
func (r *Runtime) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	return r.runc("").Kill(ctx, id, int(sig), &gorunc.KillOpts{All: true})
}

// Stop asks the container's process to end (SIGTERM to all its
// processes), and kills them all when it has not ended within grace. It
// returns once the process ended; it is for containers of this run.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) (Exit, error) {
	c, ok := r.Lookup(id)
	if !ok {
		return Exit{}, fmt.Errorf("container %s: not created by this run of the agent", id)
	}
	select {
	case <-c.done:
		return c.exit, nil
	default:
	}
	if err := r.Kill(ctx, id, syscall.SIGTERM); err != nil {
		select {
		case <-c.done: // it ended in between
			return c.exit, nil
		default:
			return Exit{}, err
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return c.exit, nil
	case <-t.C:
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
	if err := r.Kill(ctx, id, syscall.SIGKILL); err != nil {
		select {
		case <-c.done:
			return c.exit, nil
		default:
			return Exit{}, err
		}
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// Delete removes a container and all it left: its processes (runc delete
// --force kills them), its cgroups, its root filesystem mount and its
// folder. It is idempotent and works on what a crashed run left, from the
// state file alone.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	dir := r.dir(id)
	st, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// No state: nothing was made, or only the folder's last files.
		st = &State{ID: id, Rootfs: filepath.Join(dir, "rootfs")}
	} else if err != nil {
		return fmt.Errorf("container %s: state: %w", id, err)
	} else {
		st.Phase = PhaseDeleting
		_ = writeState(dir, st)
	}
	var errs []error
	if err := r.runc("").Delete(ctx, id, &gorunc.DeleteOpts{Force: true}); err != nil && !notExist(err) {
		errs = append(errs, fmt.Errorf("runc delete: %w", err))
	}
	if c, ok := r.Lookup(id); ok {
		select {
		case <-c.done:
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
		r.mu.Lock()
		delete(r.live, id)
		r.mu.Unlock()
	}
	if err := removeCgroups(st.Cgroups, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := confine.UnmountAll(st.Rootfs); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && st.Disk != "" {
		if err := confine.RemoveDisk(st.Disk, st.DiskImage); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		// The state file goes last: until then a restarted agent retries.
		for _, n := range []string{"upper", "work", "rootfs", "disk"} {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("container %s: delete: %w", id, err)
	}
	return nil
}

// Recover removes every container an earlier run of the agent left (all
// this runtime's folder holds that this run did not create), and says which.
func (r *Runtime) Recover(ctx context.Context) ([]string, error) {
	des, err := os.ReadDir(r.opt.Dir)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, de := range des {
		if de.IsDir() && validID(de.Name()) == nil {
			ids[de.Name()] = true
		}
	}
	// Containers runc knows without a folder here (a crash between runc's
	// state and ours cannot make one, but a removed folder can).
	if list, err := r.runc("").List(ctx); err == nil {
		for _, c := range list {
			ids[c.ID] = true
		}
	}
	var gone []string
	var errs []error
	for id := range ids {
		if _, ok := r.Lookup(id); ok {
			continue
		}
		if err := r.Delete(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, id)
		r.opt.Log.Info("container: removed what an earlier run left", "id", id)
	}
	return gone, errors.Join(errs...)
}

func notExist(err error) bool {
	s := err.Error()
	return strings.Contains(s, "does not exist") || strings.Contains(s, "not found")
}

func readPid(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// runcLog gives the last message runc logged, for an error.
func runcLog(p string) string {
	b, err := os.ReadFile(p)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	var m struct {
		Msg string `json:"msg"`
	}
	if json.Unmarshal([]byte(last), &m) == nil && m.Msg != "" {
		last = m.Msg
	}
	return ": " + last
}

// fileIO hands files to runc create as the container's stdout and stderr:
// its process writes there directly and goes on doing so whether or not the
// agent runs.
type fileIO struct{ out, err *os.File }

func (f fileIO) Close() error          { return nil }
func (f fileIO) Stdin() io.WriteCloser { return nil }
func (f fileIO) Stdout() io.ReadCloser { return nil }
func (f fileIO) Stderr() io.ReadCloser { return nil }
func (f fileIO) Set(cmd *exec.Cmd)     { cmd.Stdout, cmd.Stderr = f.out, f.err }
