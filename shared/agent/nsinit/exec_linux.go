//go:build linux

package nsinit

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execMarker is argv[0] of the second stage, the process that becomes the
// command where the init cannot set its limits itself (spawn): the init
// starts the binary once more, in the environment's namespaces, as root, so
// that the limits, the CPU affinity and the user are the process's own
// before the command's first instruction (prlimit on a started command
// would leave what it forks at once unlimited).
const execMarker = "envlease-nsexec"

// startStage starts the second stage, which becomes cfg's command with
// files as its descriptors 0, 1 and 2 (spawn's fallback where the kernel
// refuses to trace a child), and returns its pid once the command runs,
// with what could not be applied; or why the command did not start.
func startStage(cfg Config, files []uintptr) (int, []string, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer cfgW.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return 0, nil, err
	}
	defer repR.Close()
	// Its environment is empty: the command's comes in the configuration.
	// A terminal's command makes a session of its own, which a process
	// group's leader cannot.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{execMarker}, &syscall.ProcAttr{
		Files: []uintptr{files[0], files[1], files[2], cfgR.Fd(), repW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: !cfg.Terminal},
	})
	cfgR.Close()
	repW.Close()
	if err != nil {
		return 0, nil, fmt.Errorf("start %q: %v", cfg.Path, err)
	}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		reap(pid)
		return 0, nil, fmt.Errorf("start %q: %v", cfg.Path, err)
	}
	cfgW.Close()
	// The reports end when the command's exec closes them (close-on-exec),
	// or when the stage fails.
	var warns []string
	dec := json.NewDecoder(repR)
	for {
		var r report
		if dec.Decode(&r) != nil {
			break
		}
		warns = append(warns, r.Warnings...)
		if r.Error != "" {
			reap(pid)
			return 0, nil, fmt.Errorf("%s", r.Error)
		}
	}
	return pid, warns, nil
}

// reap kills and waits for a stage that failed, so that no zombie waits
// for the init's loop.
func reap(pid int) {
	_ = unix.Kill(pid, unix.SIGKILL)
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, 0, nil)
}

// execCommand is the stage that becomes the command (fd 3 reads the
// Config, fd 4 writes reports and closes on exec). It returns only if the
// command did not start.
func execCommand() int {
	// Affinity is a thread's: the thread that sets it is the one that execs.
	runtime.LockOSThread()
	syscall.CloseOnExec(configFd)
	syscall.CloseOnExec(reportFd)
	out := os.NewFile(reportFd, "reports")
	say := func(r report) {
		b, _ := json.Marshal(r)
		_, _ = out.Write(append(b, '\n'))
	}
	var cfg Config
	if err := json.NewDecoder(os.NewFile(configFd, "config")).Decode(&cfg); err != nil {
		say(report{Error: fmt.Sprintf("environment init: read the command's configuration: %v", err)})
		return 127
	}
	fail := func(what string, err error) int {
		say(report{Error: fmt.Sprintf("start %q: %s%v", cfg.Path, what, err)})
		return 127
	}
	// Best effort, as outside namespaces: what is not applied is a warning.
	// Set as root, so a limit above root's own is still set.
	var warns []string
	var addressSpace *syscall.Rlimit
	for _, l := range cfg.Rlimits {
		if l.Resource == unix.RLIMIT_AS {
			// Set last, just before the exec: this stage is a Go program
			// whose runtime may map more memory on its way there, and a
			// limit below what it already reserved makes that fail.
			addressSpace = &syscall.Rlimit{Cur: l.Max, Max: l.Max}
			continue
		}
		if err := syscall.Setrlimit(l.Resource, &syscall.Rlimit{Cur: l.Max, Max: l.Max}); err != nil {
			warns = append(warns, fmt.Sprintf("limit %d: %v", l.Resource, err))
		}
	}
	if len(cfg.CPUs) > 0 {
		var set unix.CPUSet
		for _, c := range cfg.CPUs {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			warns = append(warns, fmt.Sprintf("cpus: %v", err))
		}
	}
	if cfg.Terminal {
		if _, err := unix.Setsid(); err != nil {
			return fail("start a session: ", err)
		}
		if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
			return fail("take the terminal: ", err)
		}
	}
	if cfg.UID >= 0 {
		// Since Go 1.16 these apply to every thread of the process.
		if err := syscall.Setgroups(nil); err != nil {
			return fail("drop supplementary groups: ", err)
		}
		if err := syscall.Setgid(cfg.GID); err != nil {
			return fail("set its group: ", err)
		}
		if err := syscall.Setuid(cfg.UID); err != nil {
			return fail("set its user: ", err)
		}
		// The environment's user never gains privileges through a
		// set-user-ID or file-capability binary of the node.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fail("set no_new_privs: ", err)
		}
	}
	// As the user, as the agent's ForkExec does: the folder must be its.
	if dir := workingDir(cfg); dir != "" {
		if err := syscall.Chdir(dir); err != nil {
			return fail("", err)
		}
	}
	// Everything the exec needs is made now: once the address space is
	// limited, this Go program (whose runtime may already hold more than
	// the limit) must not allocate, or its runtime dies (exit 2) before
	// the command starts.
	path, err := syscall.BytePtrFromString(cfg.Path)
	if err != nil {
		return fail("", err)
	}
	argv, err := syscall.SlicePtrFromStrings(cfg.Args)
	if err != nil {
		return fail("", err)
	}
	envv, err := syscall.SlicePtrFromStrings(cfg.Env)
	if err != nil {
		return fail("", err)
	}
	// Started: said before the exec, whose close-on-exec ends the reports.
	say(report{Warnings: warns, Started: true})
	if addressSpace != nil {
		// No collection runs (it could map memory) between the limit and
		// the exec. Lowering a limit needs no privilege, so the user may
		// set it, and it cannot fail for a lower value.
		debug.SetGCPercent(-1)
		_ = syscall.Setrlimit(unix.RLIMIT_AS, addressSpace)
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	return fail("", errno)
}
