package runc

import (
	"bytes"
	"context"
	"io"
	"syscall"
	"testing"

	"github.com/creack/pty"
)

// A command exec'd with a terminal sees the terminal's size from its
// first instruction: runc copies the size of its own terminal in only
// after the command runs, so a command quick enough (stty size typed
// ahead into a shell, on a busy node) would read 0 0 without the size
// given in the spec.
func TestExecStartTerminalHasItsSizeAtOnce(t *testing.T) {
	r := newRuntime(t, "")
	ctx := testCtx(t)
	id := newID(t)
	if _, err := r.Create(ctx, lowerDir, Config{ID: id, Args: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Several times: each is one chance for the command to run before
	// runc's own resize.
	for i := range 5 {
		m, s, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		if err := pty.Setsize(m, &pty.Winsize{Rows: 30, Cols: 90}); err != nil {
			t.Fatal(err)
		}
		p, err := r.ExecStart(ctx, id, ExecRequest{Args: []string{"stty", "size"}, Stdin: s, Stdout: s, Stderr: s},
			&Terminal{Rows: 30, Cols: 90}, func(a *syscall.SysProcAttr) { a.Setsid, a.Setctty, a.Ctty = true, true, 0 })
		s.Close()
		if err != nil {
			m.Close()
			t.Fatal(err)
		}
		var out bytes.Buffer
		_, _ = io.Copy(&out, m) // ends with EIO once runc closed the terminal
		m.Close()
		code, err := p.Wait()
		if err != nil || code != 0 {
			t.Fatalf("run %d: stty size: exit %d, %v; output %q", i, code, err, out.String())
		}
		if !bytes.Contains(out.Bytes(), []byte("30 90")) {
			t.Fatalf("run %d: stty size printed %q, want 30 90", i, out.String())
		}
	}
}
