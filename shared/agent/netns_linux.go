//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/agent/nsinit"
	"github.com/envlease/envlease/shared/domain"
)

// probeNamespaces says whether environments can run in namespaces of their
// own here: it starts an init that sets them up and ends.
func probeNamespaces() error { return nsinit.Probe() }

// envNet is an environment's network namespace, as the agent holds it to
// reach the environment's exports, and its init.
type envNet struct {
	init *nsinit.Cmd
	mu   sync.RWMutex
	h    netns.NsHandle // closed (-1) once the environment ended
	// egress is the proxy of an egress environment, nil for the others.
	egress *egressProxy
}

// startNamespaced starts the command under an init of its own (nsinit) in
// new network, PID and mount namespaces, in the box's cgroup, as the box's
// user, with the template's resources, and returns once the command runs.
// With egressPort > 0 the environment's egress proxy listens there, on the
// loopback of its namespace, before the command starts.
func (a *Agent) startNamespaced(t domain.Template, b *box, path, dir string, env []string, stdout, stderr *os.File, egressPort int) (*exec.Cmd, *envNet, error) {
	uid := -1
	if b.user != nil {
		uid = b.user.uid
	}
	limits, cpus, warns := resourceLimits(t.Resources, a.cpuTurn())
	cfg := nsinit.Config{Path: path, Args: t.Command, Dir: dir, Env: env, UID: uid, GID: uid, Rlimits: limits, CPUs: cpus}
	start := func(intoCgroup bool) (*nsinit.Cmd, error) {
		c, err := nsinit.Command(cfg)
		if err != nil {
			return nil, err
		}
		c.Stdout, c.Stderr = stdout, stderr
		// The init's own environment names the folder, so a restarted
		// agent finds (and kills) what a crashed one left.
		c.Env = []string{"ENVLEASE_ROOT=" + b.root}
		if intoCgroup && b.cgroup != "" {
			fd, err := unix.Open(b.cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				c.Close()
				return nil, err
			}
			defer unix.Close(fd)
			c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, fd
		}
		if err := c.Start(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c, err := start(true)
	if err != nil && b.cgroup != "" {
		// clone3 into a cgroup needs Linux 5.7: start it plainly and move
		// it before it starts the command (it waits for its configuration).
		if c, err = start(false); err == nil {
			if jerr := b.joinCgroup(c.Process.Pid); jerr != nil {
				a.log.Warn("the environment runs outside its cgroup", "pid", c.Process.Pid, "err", jerr)
			}
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start %q in namespaces of its own: %w", t.Command[0], err)
	}
	h, err := netns.GetFromPid(c.Process.Pid)
	if err != nil {
		_ = c.Process.Kill()
		c.Close()
		_ = c.Wait()
		return nil, nil, fmt.Errorf("open the environment's network namespace: %w", err)
	}
	var egress *egressProxy
	if egressPort > 0 {
		ln, err := listenIn(h, egressPort)
		if err != nil {
			_ = c.Process.Kill()
			c.Close()
			_ = c.Wait()
			h.Close()
			return nil, nil, fmt.Errorf("open the egress proxy in the environment's network namespace: %w", err)
		}
		egress = serveEgress(ln, a.egressGuard(), a.log.With("root", b.root, "egressPort", egressPort))
	}
	more, err := c.Begin()
	if err != nil {
		_ = c.Process.Kill()
		c.Close()
		_ = c.Wait()
		h.Close()
		if egress != nil {
			egress.close()
		}
		return nil, nil, err
	}
	if warns = append(warns, more...); len(warns) > 0 {
		a.log.Warn("resources not fully applied", "pid", c.Process.Pid, "warnings", fmt.Sprint(warns))
	}
	return c.Cmd, &envNet{init: c, h: h, egress: egress}, nil
}

// ended closes the namespace handle once the init is gone, so nothing keeps
// the namespace, and the egress proxy, and says how the command ended, if
// the init told.
func (n *envNet) ended() string {
	n.mu.Lock()
	if n.h.IsOpen() {
		n.h.Close()
		n.h = netns.None()
	}
	n.mu.Unlock()
	if n.egress != nil {
		n.egress.close()
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

var errEnded = errors.New("the environment has ended")

// dial connects to port on the loopback of the environment's namespace:
// the socket is made on a thread moved into that namespace (a socket stays
// in the namespace it was made in), which goes back before it serves any
// other goroutine, or is thrown away if it cannot.
func (n *envNet) dial(ctx context.Context, port int) (net.Conn, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.h.IsOpen() {
		return nil, errEnded
	}
	var c net.Conn
	err := inNamespace(n.h, func() error {
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

// inNamespace runs fn on an OS thread moved into the network namespace h
// and back. Sockets fn makes stay in h whatever thread later uses them. A
// thread that cannot move back ends with its goroutine, still locked, so no
// other goroutine ever runs in the wrong namespace.
func inNamespace(h netns.NsHandle, fn func() error) error {
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

// listenIn listens on 127.0.0.1:port of the namespace h: it brings the
// namespace's lo up (its init does too, but only once it has its
// configuration, after this), then makes the socket on a thread moved into
// the namespace. A listening socket stays in the namespace it was made in,
// and so does every connection it accepts, whatever thread serves them.
func listenIn(h netns.NsHandle, port int) (net.Listener, error) {
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
	err = inNamespace(h, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return ln, err
}
