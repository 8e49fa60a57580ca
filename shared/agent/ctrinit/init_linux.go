//go:build linux

package ctrinit

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == Path && os.Getpid() == 1 {
		os.Exit(serve(os.Args[1:]))
	}
}

// serve runs the command args as the init's only child and returns the
// status the init exits with.
func serve(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "envlease init: no command")
		return 127
	}
	// Every signal, caught before the command starts, so none sent in
	// between is lost; SIGCHLD says a process of the container ended.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs)
	// From here a signal reaches the command. Before, the Go runtime's own
	// handler would have taken a SIGTERM and, as PID 1 ignores what it
	// does not handle, exited 2: the name says to a stop that it may
	// signal now (WaitReady).
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&readyComm[0])), 0, 0, 0)
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "envlease init: %v\n", err)
		return 127
	}
	p, err := os.StartProcess(path, args, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "envlease init: %v\n", err)
		return 126
	}
	signal.Reset(syscall.SIGPIPE, syscall.SIGTTIN, syscall.SIGTTOU)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
		case syscall.SIGURG, syscall.SIGPIPE:
			// The Go runtime's own preemption signal, and a pipe of the
			// init's that closed: not the command's business.
			continue
		default:
			_ = p.Signal(sig)
			continue
		}
		if code, ended := reap(p.Pid); ended {
			return code
		}
	}
	return 0
}

// reap waits for every process that ended (orphans are the init's) and
// says whether the command was among them, and how it ended.
func reap(child int) (code int, ended bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return code, ended
		}
		if pid == child {
			ended = true
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			} else {
				code = ws.ExitStatus()
			}
		}
	}
}
