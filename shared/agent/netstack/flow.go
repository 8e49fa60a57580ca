package netstack

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/netpolicy"
)

// flow is one open connection (TCP) or flow (UDP) through the boundary.
type flow struct {
	b     *Boundary
	proto string
	addr  netip.Addr
	port  uint16
	start time.Time
	in    net.Conn // the environment's end, in the stack
	out   net.Conn // the node's end

	// Guarded by b.mu.
	names    []string
	nameFrom string
	rule     string
	closedBy string   // the rule that closed it, after a policy change
	secrets  []string // names of the secrets added to its requests (intercept.go)

	sent, received atomic.Int64
	once           sync.Once
}

// target is what the flow is decided on (under b.mu).
func (f *flow) target() netpolicy.Target {
	return netpolicy.Target{Addr: f.addr, Port: f.port, Names: f.names}
}

func (f *flow) close() {
	f.once.Do(func() {
		if f.in != nil {
			f.in.Close()
		}
		if f.out != nil {
			f.out.Close()
		}
	})
}

// finish records the flow once it ended.
func (f *flow) finish(errText string) {
	f.close()
	f.b.untrack(f)
	f.b.mu.Lock()
	r := Record{
		Time: f.start, Proto: f.proto, Addr: f.addr.String(), Port: f.port, Rule: f.rule, Verdict: VerdictAllow,
		Sent: f.sent.Load(), Received: f.received.Load(), Error: errText,
		Duration: float64(f.b.cfg.Now().Sub(f.start).Microseconds()) / 1000,
	}
	if len(f.names) > 0 {
		r.Name, r.NameFrom = f.names[0], f.nameFrom
	}
	r.Secrets = f.secrets
	if f.closedBy != "" {
		r.Rule, r.Verdict, r.Error = f.closedBy, VerdictDeny, "closed: the environment's rules changed"
	}
	f.b.mu.Unlock()
	f.b.record(r)
}

// refuse records a refused connection.
func (b *Boundary) refuse(proto string, t netpolicy.Target, nameFrom string, d netpolicy.Decision) {
	r := Record{Time: b.cfg.Now(), Proto: proto, Addr: t.Addr.String(), Port: t.Port, Rule: d.Rule, Verdict: VerdictDeny}
	if len(t.Names) > 0 {
		r.Name, r.NameFrom = t.Names[0], nameFrom
	}
	b.record(r)
}

// counter counts what goes through a writer.
type counter struct {
	w io.Writer
	n *atomic.Int64
}

func (c counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// copyBuf is the buffer size of each direction's copy.
const copyBuf = 64 << 10

var bufs = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}

func copyCounted(dst io.Writer, src io.Reader, n *atomic.Int64) error {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	_, err := io.CopyBuffer(counter{dst, n}, src, *bp)
	return err
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}
