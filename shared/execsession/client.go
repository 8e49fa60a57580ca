package execsession

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel"
)

// Options are one command to run.
type Options struct {
	Command []string
	// TTY runs it in a pseudo-terminal of Size; its output then all comes
	// on Stdout.
	TTY  bool
	Size Size
	// Term is TERM inside with a terminal ("" for xterm-256color).
	Term string
	// Stdin is the command's input (nil: none); Stdout and Stderr get its
	// output (nil: discarded).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Resize carries the terminal's new sizes, Signals signals for the
	// command (by their names in Signals); both optional.
	Resize  <-chan Size
	Signals <-chan syscall.Signal
	// Dial opens the connection (nil: tunnel.UpgradeDialer(nil)).
	Dial tunnel.Dialer
}

// RefusedError is the agent's refusal of the command itself (not the
// ticket's at the upgrade, which is a *tunnel.RefusedError): no such
// program, a command the ticket does not name.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "the node did not run the command: " + e.Reason }

// ErrLost is a session that ended before the command's exit came.
var ErrLost = errors.New("the connection to the node ended before the command did")

// Run runs o.Command through the agent at url with an exec ticket and
// returns its exit code.
func Run(ctx context.Context, url, ticket string, o Options) (int, error) {
	dial := o.Dial
	if dial == nil {
		dial = tunnel.UpgradeDialer(nil)
	}
	conn, err := dial(ctx, url, http.Header{"Authorization": {"Bearer " + ticket}})
	if err != nil {
		return 0, err
	}
	sess, err := yamux.Client(tunnel.MuxConn(conn), tunnel.MuxConfig())
	if err != nil {
		conn.Close()
		return 0, err
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()

	open := func(h Hello) (*yamux.Stream, error) {
		st, err := sess.OpenStream()
		if err != nil {
			return nil, err
		}
		return st, writeLine(st, h)
	}
	control, err := open(Hello{Stream: StreamControl, Command: o.Command, TTY: o.TTY, Rows: o.Size.Rows, Cols: o.Size.Cols, Term: o.Term})
	if err != nil {
		return 0, lost(ctx, err)
	}
	stdin, err := open(Hello{Stream: StreamStdin})
	if err != nil {
		return 0, lost(ctx, err)
	}
	stdout, err := open(Hello{Stream: StreamStdout})
	if err != nil {
		return 0, lost(ctx, err)
	}
	var stderr *yamux.Stream
	if !o.TTY {
		if stderr, err = open(Hello{Stream: StreamStderr}); err != nil {
			return 0, lost(ctx, err)
		}
	}
	r := bufio.NewReaderSize(control, 4096)
	_ = control.SetReadDeadline(time.Now().Add(HeaderTimeout))
	var st Status
	if err := readLine(r, &st); err != nil {
		return 0, lost(ctx, fmt.Errorf("no answer from the node: %w", err))
	}
	if !st.OK {
		if st.Error == "" {
			st.Error = "refused"
		}
		return 0, &RefusedError{Reason: st.Error}
	}
	_ = control.SetReadDeadline(time.Time{})

	// Output first: the exit comes after it all.
	var out sync.WaitGroup
	drain := func(dst io.Writer, src io.Reader) {
		defer out.Done()
		if dst == nil {
			dst = io.Discard
		}
		_, _ = io.Copy(dst, src)
	}
	out.Add(1)
	go drain(o.Stdout, stdout)
	if stderr != nil {
		out.Add(1)
		go drain(o.Stderr, stderr)
	}
	// Input is not waited for: a terminal's reader may never return.
	go func() {
		if o.Stdin != nil {
			_, _ = io.Copy(stdin, o.Stdin)
		}
		stdin.Close()
	}()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			var c Control
			select {
			case <-done:
				return
			case sz := <-o.Resize:
				c.Resize = &sz
			case sig := <-o.Signals:
				if c.Signal = SignalName(sig); c.Signal == "" {
					continue
				}
			}
			if writeLine(control, c) != nil {
				return
			}
		}
	}()
	err = readLine(r, &st)
	out.Wait()
	if err != nil || st.Exit == nil {
		return 0, lost(ctx, err)
	}
	return *st.Exit, nil
}

func lost(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		return ErrLost
	}
	return fmt.Errorf("%w: %v", ErrLost, err)
}

// API is what Exec asks of the service (a *client.Client).
type API interface {
	CreateExec(ctx context.Context, id string, req client.ExecRequest) (client.ExecTicket, error)
	TouchEnvironment(ctx context.Context, id string) (domain.Environment, error)
}

// Exec asks for a ticket for o.Command in environment id, runs it, and
// touches the environment while it runs (a third of its idle timeout
// apart, at most a minute), so that a long command or an open shell keeps
// it from going idle. It returns the command's exit code.
func Exec(ctx context.Context, api API, id string, o Options) (int, error) {
	tk, err := api.CreateExec(ctx, id, client.ExecRequest{Command: o.Command, TTY: o.TTY})
	if err != nil {
		return 0, err
	}
	e, err := api.TouchEnvironment(ctx, id)
	if err != nil {
		return 0, err
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(TouchEvery(e.Idle.Std()))
		defer t.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-t.C:
				// A touch that fails is tried again at the next tick; the
				// command itself is the node's to end.
				_, _ = api.TouchEnvironment(tctx, id)
			}
		}
	}()
	return Run(ctx, tk.URL, tk.Ticket, o)
}

// TouchEvery is min(idle/3, 1 min), at least a second: three touches fit
// in the idle timeout, so one lost touch never lets the environment idle.
func TouchEvery(idle time.Duration) time.Duration {
	return max(time.Second, min(idle/3, time.Minute))
}
