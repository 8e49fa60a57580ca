package tunnel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"
)

// Dialer opens the byte stream a tunnel session runs on: an upgraded HTTP
// connection (Protocol) or a WebSocket to url, with header on the upgrade
// request. Tests put their own in front of the default to watch or break
// connections.
type Dialer func(ctx context.Context, url string, header http.Header) (net.Conn, error)

// RefusedError is an agent's refusal of a tunnel at the upgrade: 401 for a
// ticket it cannot accept (expired, not signed with its key, malformed),
// 403 for one that is not for it (another node, organization, or an
// environment it does not run), 503 while it is not ready for tunnels.
type RefusedError struct {
	Status int
	Reason string
}

func (e *RefusedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("the node refused the tunnel (%d %s)", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("the node refused the tunnel: %s (%d)", e.Reason, e.Status)
}

// WebSocketDialer dials a WebSocket only, with hc (nil: a plain
// http.Client, so the environment's proxy settings apply as to any HTTP
// request).
func WebSocketDialer(hc *http.Client) Dialer {
	return func(ctx context.Context, url string, header http.Header) (net.Conn, error) {
		ws, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: header})
		if err != nil {
			if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
				return nil, refused(res)
			}
			return nil, err
		}
		// The session, not the dial, decides how long the connection lives.
		return websocket.NetConn(context.Background(), ws, websocket.MessageBinary), nil
	}
}

func refused(res *http.Response) error {
	e := &RefusedError{Status: res.StatusCode}
	if res.Body != nil {
		var body struct {
			Error string `json:"error"`
		}
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		if json.Unmarshal(raw, &body) == nil {
			e.Reason = body.Error
		}
	}
	return e
}

// Session is one tunnel: a yamux session over one WebSocket to an agent.
// It is safe for concurrent use.
type Session struct {
	mux *yamux.Session
}

// Dial opens a tunnel to url with ticket. dial nil means UpgradeDialer(nil).
func Dial(ctx context.Context, dial Dialer, url, ticket string) (*Session, error) {
	if dial == nil {
		dial = UpgradeDialer(nil)
	}
	conn, err := dial(ctx, url, http.Header{"Authorization": {"Bearer " + ticket}})
	if err != nil {
		return nil, err
	}
	mux, err := yamux.Client(MuxConn(conn), MuxConfig())
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Session{mux: mux}, nil
}

// StreamError is an agent's refusal of one stream: a target the ticket or
// the environment does not have, one it could not reach, too many streams.
type StreamError struct {
	Target, Reason string
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("the node refused the connection to %s: %s", e.Target, e.Reason)
}

// Open opens a stream to target (one of the ticket's) and returns it as a
// connection once the agent has connected it.
func (s *Session) Open(ctx context.Context, target string) (net.Conn, error) {
	st, err := s.mux.OpenStream()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(HeaderTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	defer stop()
	if err := WriteLine(st, Request{Target: target}); err != nil {
		st.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(st, 4096)
	var rep Reply
	if err := ReadLine(r, &rep); err != nil {
		st.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("tunnel: no answer about %s: %w", target, err)
	}
	if !rep.OK {
		st.Close()
		if rep.Error == "" {
			rep.Error = "refused"
		}
		return nil, &StreamError{Target: target, Reason: strings.TrimSpace(rep.Error)}
	}
	if !stop() {
		st.Close()
		return nil, ctx.Err()
	}
	_ = st.SetDeadline(time.Time{})
	return NewBufConn(st, r), nil
}

// Streams is how many streams are open.
func (s *Session) Streams() int { return s.mux.NumStreams() }

// Done is closed when the session has ended (closed, or its connection lost).
func (s *Session) Done() <-chan struct{} { return s.mux.CloseChan() }

// Close ends the session and every stream on it.
func (s *Session) Close() error { return s.mux.Close() }

// IsRefusal reports whether err is the agent refusing a ticket (401 or 403).
func IsRefusal(err error) bool {
	var re *RefusedError
	return errors.As(err, &re) && (re.Status == http.StatusUnauthorized || re.Status == http.StatusForbidden)
}
