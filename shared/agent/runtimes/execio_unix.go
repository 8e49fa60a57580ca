//go:build unix

package runtimes

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// outputLinger bounds how long output is still read once the command has
// exited: a process it left behind that holds its output open must not
// hold the exec.
const outputLinger = 2 * time.Second

// ExecIO are the files a runtime hands the process it starts for an
// ExecSpec: one pseudo-terminal's slave for all three with TTY, else the
// child's ends of three pipes. The agent's ends are copied to and from the
// spec's streams.
type ExecIO struct {
	// Stdin, Stdout and Stderr are the child's.
	Stdin, Stdout, Stderr *os.File

	spec   ExecSpec
	master *os.File // TTY
	in     *os.File // the agent's end of stdin (pipes)
	outs   []*os.File
	copied sync.WaitGroup
	closed sync.Once
}

// NewExecIO makes the files for spec.
func NewExecIO(spec ExecSpec) (*ExecIO, error) {
	x := &ExecIO{spec: spec}
	if spec.TTY {
		m, s, err := pty.Open()
		if err != nil {
			return nil, err
		}
		if spec.Rows > 0 && spec.Cols > 0 {
			_ = pty.Setsize(m, &pty.Winsize{Rows: spec.Rows, Cols: spec.Cols})
		}
		x.master, x.Stdin, x.Stdout, x.Stderr = m, s, s, s
		x.outs = []*os.File{m}
		return x, nil
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	x.Stdin, x.Stdout, x.Stderr = inR, outW, errW
	x.in, x.outs = inW, []*os.File{outR, errR}
	return x, nil
}

// SysProcAttr sets what a terminal needs on the process that gets the
// files: a session of its own whose controlling terminal is the pty, so
// that the terminal's signals (Ctrl-C, a resize) reach it.
func (x *ExecIO) SysProcAttr(a *syscall.SysProcAttr) {
	if x.master == nil {
		return
	}
	a.Setsid, a.Setctty, a.Ctty, a.Setpgid = true, true, 0, false
}

// Started closes the child's files in the agent (so that the output ends
// when the command's does) and starts copying.
func (x *ExecIO) Started() {
	if x.master != nil {
		x.Stdin.Close()
	} else {
		x.Stdin.Close()
		x.Stdout.Close()
		x.Stderr.Close()
	}
	dsts := []io.Writer{x.spec.Stdout, x.spec.Stderr}
	for i, r := range x.outs {
		dst := dsts[i]
		if dst == nil {
			dst = io.Discard
		}
		x.copied.Add(1)
		go func() {
			defer x.copied.Done()
			_, _ = io.Copy(dst, r) // a pty's master ends with EIO
		}()
	}
	in := x.in
	if x.master != nil {
		in = x.master
	}
	go func() {
		if x.spec.Stdin != nil {
			_, _ = io.Copy(in, x.spec.Stdin)
		}
		// A terminal's input ends with the terminal; a pipe's is closed.
		if x.master == nil {
			in.Close()
		}
	}()
}

// Finish waits for the output once the command has exited (for at most
// outputLinger) and closes every file.
func (x *ExecIO) Finish() {
	done := make(chan struct{})
	go func() { x.copied.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(outputLinger):
	}
	x.Close()
	<-done
}

// Close closes the files (a start that failed, or after Finish).
func (x *ExecIO) Close() {
	x.closed.Do(func() {
		for _, f := range append([]*os.File{x.master, x.in, x.Stdin, x.Stdout, x.Stderr}, x.outs...) {
			if f != nil {
				f.Close()
			}
		}
	})
}

// Resize sets the terminal's size.
func (x *ExecIO) Resize(rows, cols uint16) error {
	if x.master == nil {
		return nil
	}
	return pty.Setsize(x.master, &pty.Winsize{Rows: rows, Cols: cols})
}

// ExitCode is a wait status as a shell reports it: the exit status, or 128
// plus the signal that ended the process.
func ExitCode(st *os.ProcessState) (int, error) {
	if st == nil {
		return 0, errors.New("the process did not end")
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return st.ExitCode(), nil
}
