package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
)

// waitReady waits until every export's port accepts a TCP connection
// where the environment listens (Handle.Dial: at the node's address, or on
// the loopback of its network namespace), the command exits, stop is
// closed, or the ready timeout.
func (a *Agent) waitReady(ctx context.Context, h runtimes.Handle, stop <-chan struct{}) error {
	deadline := time.NewTimer(a.cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	ports := h.Ports()
	lc, _ := h.(runtimes.ListenerChecker)
	for {
		pending := ""
		for s, port := range ports {
			dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			c, err := h.Dial(dctx, port)
			cancel()
			if err == nil {
				c.Close()
				if lc != nil {
					err = lc.CheckListener(port)
				}
			}
			if err != nil {
				pending = fmt.Sprintf("export %s (port %d)", s, port)
				break
			}
		}
		if pending == "" {
			if len(ports) > 0 {
				if lc != nil {
					lc.AllReady()
				}
				return nil
			}
			// No exports: ready as soon as the command is started and
			// confined, with no wait. One that exits at once has already
			// ended here (failed, not ready); one that exits a moment later
			// is reported failed after ready, by runEnv's wait for its end,
			// as any command that ends on its own is.
			select {
			case <-h.Done():
				return h.Err()
			default:
				return nil
			}
		}
		select {
		case <-h.Done():
			return h.Err()
		case <-stop:
			return errStopped
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			at := a.cfg.Address
			if h.Namespaced() {
				at = "the loopback of its network namespace"
			}
			return fmt.Errorf("not ready within %s: %s never accepted a connection at %s", a.cfg.ReadyTimeout, pending, at)
		case <-tick.C:
		}
	}
}

var errStopped = errors.New("stop requested")
