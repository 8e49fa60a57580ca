//go:build linux

package nsinit

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The init starts every command itself, the template's and each exec's,
// with one fork and exec and no program of its own in between, and still
// confines it from its first instruction:
//
//   - the user, its group, no supplementary groups, its folder, a session
//     or a process group: the child's own steps before its exec
//     (syscall.SysProcAttr);
//   - no_new_privs and the CPU affinity are attributes of a thread that a
//     child inherits: the init sets them on its own thread, the one locked
//     to its main goroutine that forks every command (the affinity only
//     for the fork: it is put back at once);
//   - RLIMIT_NPROC is set on the init itself: the kernel counts it per real
//     user and never refuses a fork to root, so it costs the init nothing,
//     and the child's exec, once it is the environment's user, is refused
//     when that user has too many processes, as with the limit set before;
//   - any other limit (RLIMIT_AS, the address space) would bound the init
//     too, a Go program that maps memory as it goes: the child is traced
//     through its exec (PTRACE_TRACEME), which stops it after the exec and
//     before the command's first instruction; the init sets the limits on
//     it then (prlimit) and lets it go.
//
// Where tracing is refused (a seccomp filter, Yama's ptrace_scope 3), or
// the init may not set another user's limits (it lacks CAP_SYS_RESOURCE, as
// in a container that drops it), a command with such a limit goes through
// the second stage (execCommand), which sets the limits on itself and execs
// the command: one program start more.

// ownLimits are the init's own limits as they were before a command's set
// them, put back for a command without.
var ownLimits = map[int]unix.Rlimit{}

// onInit says whether a limit may be set on the init itself.
func onInit(resource int) bool { return resource == unix.RLIMIT_NPROC }

// traceRefused is set once the kernel refused to trace a child: every
// command with limits then goes through the second stage.
var traceRefused bool

// mayLimitOthers says whether the init may set the limits of a process of
// another user: CAP_SYS_RESOURCE (prlimit(2)).
var mayLimitOthers = sync.OnceValue(func() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) != 0
})

// spawn starts cfg's command with files as its descriptors 0, 1 and 2, on
// the calling thread, which must be locked to its goroutine and be the only
// one of the init that waits for children (a traced child's stop is the
// tracer's to see). It returns the command's pid once it runs, what could
// not be applied, and the command's wait status if it ended before its
// first instruction (then it was reaped already).
func spawn(cfg Config, files []uintptr) (int, []string, *unix.WaitStatus, error) {
	var (
		warns []string
		later []Rlimit
	)
	for _, l := range cfg.Rlimits {
		if onInit(l.Resource) {
			if err := setOwnLimit(l.Resource, &unix.Rlimit{Cur: l.Max, Max: l.Max}); err != nil {
				warns = append(warns, fmt.Sprintf("limit %d: %v", l.Resource, err))
			}
			continue
		}
		later = append(later, l)
	}
	// A limit the command does not have is the init's own again.
	for r := range ownLimits {
		if !hasLimit(cfg.Rlimits, r) {
			_ = setOwnLimit(r, nil)
		}
	}
	if len(later) > 0 && (traceRefused || cfg.UID > 0 && !mayLimitOthers()) {
		pid, more, err := startStage(cfg, files)
		return pid, append(warns, more...), nil, err
	}
	if len(cfg.CPUs) > 0 {
		var was, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &was); err != nil {
			warns = append(warns, fmt.Sprintf("cpus: %v", err))
		} else {
			for _, c := range cfg.CPUs {
				set.Set(c)
			}
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				warns = append(warns, fmt.Sprintf("cpus: %v", err))
			} else {
				defer unix.SchedSetaffinity(0, &was) //nolint:errcheck
			}
		}
	}
	attr := &syscall.SysProcAttr{Setpgid: !cfg.Terminal, Ptrace: len(later) > 0}
	if cfg.Terminal {
		// Its descriptor 0 is the terminal: its own, in a session of its own.
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	}
	if cfg.UID >= 0 {
		// The environment's user never gains privileges through a
		// set-user-ID or file-capability program of the node. Once set on
		// this thread it stays: the init, root already, execs nothing.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 0, nil, nil, fmt.Errorf("start %q: set no_new_privs: %v", cfg.Path, err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}}
	}
	env := cfg.Env
	if env == nil {
		env = []string{}
	}
	// The child changes folder as the user, after its credentials: the
	// folder must be the user's to enter.
	pid, err := syscall.ForkExec(cfg.Path, cfg.Args, &syscall.ProcAttr{Dir: workingDir(cfg), Env: env, Files: files, Sys: attr})
	if err != nil {
		if attr.Ptrace && errors.Is(err, syscall.EPERM) {
			traceRefused = true
			pid, more, err := startStage(cfg, files)
			return pid, append(warns, more...), nil, err
		}
		return 0, nil, nil, fmt.Errorf("start %q: %v", cfg.Path, err)
	}
	if !attr.Ptrace {
		return pid, warns, nil, nil
	}
	more, ended := limitTraced(pid, later)
	return pid, append(warns, more...), ended, nil
}

// limitTraced sets limits on a child stopped after its exec, then lets it
// go. A signal that reaches it first is passed on; if that ends it, its
// status is returned.
func limitTraced(pid int, limits []Rlimit) ([]string, *unix.WaitStatus) {
	var warns []string
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			if err == unix.EINTR {
				continue
			}
			return append(warns, fmt.Sprintf("limits: wait for the command's exec: %v", err)), nil
		}
		if !ws.Stopped() {
			return warns, &ws
		}
		if sig := ws.StopSignal(); sig != unix.SIGTRAP {
			_ = unix.PtraceCont(pid, int(sig))
			continue
		}
		for _, l := range limits {
			if err := unix.Prlimit(pid, l.Resource, &unix.Rlimit{Cur: l.Max, Max: l.Max}, nil); err != nil {
				warns = append(warns, fmt.Sprintf("limit %d: %v", l.Resource, err))
			}
		}
		// Detached without the SIGTRAP of its exec, the command starts.
		if err := unix.PtraceDetach(pid); err != nil {
			warns = append(warns, fmt.Sprintf("limits: let the command go: %v", err))
		}
		return warns, nil
	}
}

func hasLimit(limits []Rlimit, resource int) bool {
	for _, l := range limits {
		if l.Resource == resource {
			return true
		}
	}
	return false
}

// setOwnLimit sets one of the init's limits, or with nil puts back what it
// was.
func setOwnLimit(resource int, lim *unix.Rlimit) error {
	if _, ok := ownLimits[resource]; !ok {
		var was unix.Rlimit
		if err := unix.Prlimit(0, resource, nil, &was); err != nil {
			return err
		}
		ownLimits[resource] = was
	}
	if lim == nil {
		was := ownLimits[resource]
		lim = &was
	}
	return unix.Prlimit(0, resource, lim, nil)
}
