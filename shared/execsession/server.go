package execsession

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
)

// Process is a command started inside an environment.
type Process interface {
	// Wait returns the command's exit code (128 + signal when a signal
	// ended it) once it has exited and its output has been written.
	Wait() (int, error)
	// Resize changes the terminal's size; without one it does nothing.
	Resize(Size) error
	// Signal sends sig to the command.
	Signal(syscall.Signal) error
}

// Stdio is what a started command reads and writes.
type Stdio struct {
	// Stdin ends (EOF) when the client's input ends.
	Stdin io.Reader
	// Stdout carries the terminal with a terminal; Stderr is then nil.
	Stdout, Stderr io.Writer
}

// Start starts the command a client asked for (Hello of the control
// stream): it checks that the ticket allows it, and returns once it runs.
// An error is sent to the client as it is.
type Start func(ctx context.Context, req Hello, stdio Stdio) (Process, error)

// hangupGrace is how long a command whose client has gone has between
// SIGHUP and SIGKILL, as a terminal that closes gives its shell.
const hangupGrace = 5 * time.Second

// exitLinger bounds how long the agent keeps a session whose command has
// ended for its client to read the exit and close it.
const exitLinger = 10 * time.Second

// Serve runs the one command of an exec session and ends the session.
func Serve(ctx context.Context, sess *yamux.Session, start Start, log *slog.Logger) {
	defer sess.Close()
	s, err := gather(ctx, sess)
	if err != nil {
		refuse(sess, s.control, err, log)
		return
	}
	stdio := Stdio{Stdin: s.stdin, Stdout: s.stdout}
	if !s.hello.TTY {
		stdio.Stderr = s.stderr
	}
	p, err := start(ctx, s.hello, stdio)
	if err != nil {
		refuse(sess, s.control, err, log)
		return
	}
	if err := writeLine(s.control, Status{OK: true}); err != nil {
		_ = p.Signal(syscall.SIGKILL)
		_, _ = p.Wait()
		return
	}
	log.Info("exec started", "tty", s.hello.TTY)
	began := time.Now()
	go controls(s.ctrlR, p, log)
	ended := make(chan struct{})
	go hangup(sess, p, ended)
	code, err := p.Wait()
	close(ended)
	if err != nil {
		log.Warn("exec: the command's end is not known", "err", err)
	}
	s.stdout.Close()
	if s.stderr != nil {
		s.stderr.Close()
	}
	_ = writeLine(s.control, Status{Exit: &code})
	s.control.Close()
	log.Info("exec ended", "exit", code, "took", time.Since(began).Round(time.Millisecond))
	select {
	case <-sess.CloseChan():
	case <-time.After(exitLinger):
	}
}

// refuse tells the client why its command does not run, then keeps the
// session until the client has read it and closed it (at most exitLinger),
// as an ended command's session is kept: a session closed at once could
// end on the client's side before the refusal was read there, which then
// saw only the session's shutdown.
func refuse(sess *yamux.Session, control *yamux.Stream, err error, log *slog.Logger) {
	log.Info("exec refused", "reason", err.Error())
	if control == nil {
		return
	}
	if writeLine(control, Status{Error: err.Error()}) != nil {
		return
	}
	control.Close()
	select {
	case <-sess.CloseChan():
	case <-time.After(exitLinger):
	}
}

// streams are a session's streams once named.
type streams struct {
	hello                          Hello
	control, stdout, stderr, other *yamux.Stream
	ctrlR                          *bufio.Reader
	stdin                          io.Reader
}

// gather accepts the session's streams until it has each it needs.
func gather(ctx context.Context, sess *yamux.Session) (streams, error) {
	var s streams
	ctx, cancel := context.WithTimeout(ctx, HeaderTimeout)
	defer cancel()
	for s.control == nil || s.stdin == nil || s.stdout == nil || (s.stderr == nil && !s.hello.TTY) {
		st, err := sess.AcceptStreamWithContext(ctx)
		if err != nil {
			return s, fmt.Errorf("the session's streams did not all open within %s", HeaderTimeout)
		}
		_ = st.SetReadDeadline(time.Now().Add(HeaderTimeout))
		r := bufio.NewReaderSize(st, 4096)
		var h Hello
		if err := readLine(r, &h); err != nil {
			st.Close()
			return s, fmt.Errorf("a stream must start with one line {\"stream\": ...}: %v", err)
		}
		_ = st.SetReadDeadline(time.Time{})
		dup := false
		switch h.Stream {
		case StreamControl:
			dup = s.control != nil
			s.control, s.ctrlR, s.hello = st, r, h
		case StreamStdin:
			dup = s.stdin != nil
			s.stdin = r
		case StreamStdout:
			dup = s.stdout != nil
			s.stdout = st
		case StreamStderr:
			dup = s.stderr != nil
			s.stderr = st
		default:
			st.Close()
			return s, fmt.Errorf("unknown stream %q: a session has control, stdin, stdout and stderr", h.Stream)
		}
		if dup {
			return s, fmt.Errorf("stream %q opened twice", h.Stream)
		}
	}
	return s, nil
}

// controls applies the client's control lines until the stream ends.
func controls(r *bufio.Reader, p Process, log *slog.Logger) {
	for {
		var c Control
		if err := readLine(r, &c); err != nil {
			return
		}
		if c.Resize != nil && c.Resize.Rows > 0 && c.Resize.Cols > 0 {
			if err := p.Resize(*c.Resize); err != nil {
				log.Info("exec: resize", "err", err)
			}
		}
		if c.Signal != "" {
			if sig, ok := Signals[c.Signal]; ok {
				_ = p.Signal(sig)
			}
		}
	}
}

// hangup ends a command whose client has gone: SIGHUP, then SIGKILL.
func hangup(sess *yamux.Session, p Process, ended <-chan struct{}) {
	select {
	case <-ended:
		return
	case <-sess.CloseChan():
	}
	_ = p.Signal(syscall.SIGHUP)
	select {
	case <-ended:
	case <-time.After(hangupGrace):
		_ = p.Signal(syscall.SIGKILL)
	}
}
