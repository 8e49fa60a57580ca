//go:build linux

package confine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/envlease/envlease/shared/agent/nsinit"
)

// ProbeNamespaces says whether environments can run in namespaces of their
// own here: it starts an init that sets them up and ends.
func ProbeNamespaces() error { return nsinit.Probe() }

// Net is an environment's network namespace, as the agent holds it to
// reach the environment's exports, and its init.
type Net struct {
	init *nsinit.Cmd
	mu   sync.RWMutex
	h    netns.NsHandle // closed (-1) once the environment ended
	// egress is the proxy or boundary of an environment that reaches out,
	// nil for the others.
	egress Egress
}

// NewNet holds an environment's network namespace h (which Ended closes),
// with the init whose status Ended reads (nil for a container's, whose
// runtime says how it ended) and the egress proxy or network boundary
// served in it (nil for none).
func NewNet(h netns.NsHandle, init *nsinit.Cmd, egress Egress) *Net {
	return &Net{init: init, h: h, egress: egress}
}

// Init is the environment's init, which runs commands inside it
// (nsinit.Cmd.Exec); nil for a container's.
func (n *Net) Init() *nsinit.Cmd { return n.init }

// Ended closes the namespace handle once the init is gone, so nothing keeps
// the namespace, and the egress proxy, and says how the command ended, if
// the init told.
func (n *Net) Ended() string {
	n.mu.Lock()
	if n.h.IsOpen() {
		n.h.Close()
		n.h = netns.None()
	}
	n.mu.Unlock()
	if n.egress != nil {
		n.egress.Close()
	}
	if n.init == nil {
		return "" // a container's: its runtime says how it ended
	}
	ws, ok := n.init.Status()
	if !ok {
		return ""
	}
	return describeWait(syscall.WaitStatus(ws))
}

func describeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

// ErrEnded is what Dial answers once the environment ended.
var ErrEnded = errors.New("the environment has ended")

// Dial connects to port on the loopback of the environment's namespace:
// the socket is made on a thread moved into that namespace (a socket stays
// in the namespace it was made in), which goes back before it serves any
// other goroutine, or is thrown away if it cannot.
func (n *Net) Dial(ctx context.Context, port int) (net.Conn, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.h.IsOpen() {
		return nil, ErrEnded
	}
	var c net.Conn
	err := InNamespace(n.h, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			// A command listening on localhost may have bound only ::1.
			if c6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
				c, err = c6, nil
			}
		}
		return err
	})
	return c, err
}

// InNamespace runs fn on an OS thread moved into the network namespace h
// and back. Sockets fn makes stay in h whatever thread later uses them. A
// thread that cannot move back ends with its goroutine, still locked, so no
// other goroutine ever runs in the wrong namespace.
func InNamespace(h netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer own.Close()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		err = fn()
		if netns.Set(own) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// ListenIn listens on 127.0.0.1:port of the namespace h: it brings the
// namespace's lo up (its init does too, but only once it has its
// configuration, after this), then makes the socket on a thread moved into
// the namespace. A listening socket stays in the namespace it was made in,
// and so does every connection it accepts, whatever thread serves them.
func ListenIn(h netns.NsHandle, port int) (net.Listener, error) {
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink in the namespace: %w", err)
	}
	defer nl.Close()
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		return nil, fmt.Errorf("bring lo up: %w", err)
	}
	var ln net.Listener
	err = InNamespace(h, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return ln, err
}
