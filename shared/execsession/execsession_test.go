package execsession_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/execsession"
	"github.com/envlease/envlease/shared/tunnel"
)

// process is a command the fake agent "runs": it echoes its input, and
// ends with the code it is sent (or 128 + a signal it gets).
type process struct {
	stdio   execsession.Stdio
	end     chan int
	mu      sync.Mutex
	resized []execsession.Size
}

func (p *process) Wait() (int, error) {
	_, _ = io.Copy(p.stdio.Stdout, p.stdio.Stdin)
	return <-p.end, nil
}

func (p *process) Resize(s execsession.Size) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resized = append(p.resized, s)
	return nil
}

func (p *process) Signal(sig syscall.Signal) error {
	select {
	case p.end <- 128 + int(sig):
	default:
	}
	return nil
}

// agent serves exec sessions as the node's endpoint does, without the
// ticket checks (shared/agent's tests have them).
func agent(t *testing.T, started chan<- *process) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := tunnel.Accept(w, r)
		if err != nil {
			return
		}
		sess, err := yamux.Server(tunnel.MuxConn(conn), tunnel.MuxConfig())
		if err != nil {
			return
		}
		execsession.Serve(r.Context(), sess, func(_ context.Context, req execsession.Hello, stdio execsession.Stdio) (execsession.Process, error) {
			p := &process{stdio: stdio, end: make(chan int, 1)}
			started <- p
			return p, nil
		}, slog.New(slog.DiscardHandler))
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + tunnel.Path
}

type api struct {
	url     string
	touches atomic.Int32
}

func (a *api) CreateExec(context.Context, string, client.ExecRequest) (client.ExecTicket, error) {
	return client.ExecTicket{URL: a.url, Ticket: "t"}, nil
}

func (a *api) TouchEnvironment(_ context.Context, id string) (domain.Environment, error) {
	a.touches.Add(1)
	return domain.Environment{ID: id, Idle: domain.Duration(3 * time.Second)}, nil
}

// While a command runs, Exec touches its environment (here every second:
// a third of its idle timeout); resizes and signals reach the command;
// input comes through and the exit code comes back after the output.
func TestExecTouchesResizesAndSignals(t *testing.T) {
	started := make(chan *process, 1)
	a := &api{url: agent(t, started)}
	resize := make(chan execsession.Size, 1)
	sigs := make(chan syscall.Signal, 1)
	var out bytes.Buffer
	done := make(chan struct{})
	var code int
	var err error
	go func() {
		defer close(done)
		code, err = execsession.Exec(context.Background(), a, "env_1", execsession.Options{Command: []string{"sh"},
			Stdin: strings.NewReader("echoed"), Stdout: &out, Resize: resize, Signals: sigs})
	}()
	p := <-started
	for deadline := time.Now().Add(time.Minute); a.touches.Load() < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("touches while the command runs: %d", a.touches.Load())
		}
	}
	resize <- execsession.Size{Rows: 10, Cols: 20}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		n := len(p.resized)
		p.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resize never came")
		}
	}
	sigs <- syscall.SIGINT
	<-done
	if err != nil || code != 130 || out.String() != "echoed" {
		t.Fatalf("exit %d, %v, output %q", code, err, out.String())
	}
	if got := p.resized[0]; got != (execsession.Size{Rows: 10, Cols: 20}) {
		t.Fatalf("resized to %+v", got)
	}
}
