package agent

import (
	"context"
	"time"
)

// openSocket opens the node protocol's WebSocket: once with
// TransportAuto (a failure means HTTP for this session), until it opens
// with TransportWebSocket.
func (a *Agent) openSocket(ctx context.Context, url string) (*socketClient, error) {
	backoff := reconnectFirst
	for {
		sock, err := a.dialSocket(ctx, url)
		if err == nil || a.cfg.Transport != TransportWebSocket || ctx.Err() != nil {
			return sock, err
		}
		a.log.Warn("the node protocol's WebSocket did not open; retrying", "url", url, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(jittered(backoff)):
		}
		backoff = min(backoff*2, reconnectMax)
	}
}

// Transport says how the agent speaks to the service now: "websocket"
// while its node protocol connection is open, else "http".
func (a *Agent) Transport() string {
	if a.sock.Load() != nil {
		return TransportWebSocket
	}
	return TransportHTTP
}

// Reconnects counts how often the node protocol's connection was opened
// again after it dropped.
func (a *Agent) Reconnects() int64 { return a.reconnects.Load() }
