package nodes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// SocketPath is where the local stack serves the node protocol.
const SocketPath = "/v1/nodes/socket"

// LocalSockets serves the node protocol over WebSockets in-process, as API
// Gateway does in AWS: opening a connection authenticates the node
// credential (API Gateway's $connect authorizer), every message goes to
// Socket.Handle in a goroutine of its own (as each is a Lambda invocation
// there), a request's answer goes back on its connection, and closing calls
// Disconnect. It is also the Poster of the local stack: its connection
// table is in memory.
type LocalSockets struct {
	socket *Socket
	auth   httpapi.Authenticator
	ctx    context.Context

	mu    sync.Mutex
	conns map[ConnectionID]*websocket.Conn
	wg    sync.WaitGroup
	// drop, when set, swallows posts for which it returns true: tests lose
	// offers with it.
	drop func(conn ConnectionID, msg []byte) bool
}

// NewLocalSockets returns the local node protocol server. Connections end
// when ctx does.
func NewLocalSockets(ctx context.Context, socket *Socket, auth httpapi.Authenticator) *LocalSockets {
	return &LocalSockets{socket: socket, auth: auth, ctx: ctx, conns: map[ConnectionID]*websocket.Conn{}}
}

// DropPosts makes the server swallow the posts f returns true for (nil:
// none), as a lost message would be.
func (l *LocalSockets) DropPosts(f func(conn ConnectionID, msg []byte) bool) {
	l.mu.Lock()
	l.drop = f
	l.mu.Unlock()
}

// Post sends msg to an open connection; ErrGone when it is not open.
func (l *LocalSockets) Post(ctx context.Context, conn ConnectionID, msg []byte) error {
	l.mu.Lock()
	c, drop := l.conns[conn], l.drop
	l.mu.Unlock()
	if c == nil {
		return ErrGone
	}
	if drop != nil && drop(conn, msg) {
		return nil
	}
	if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
		return ErrGone
	}
	return nil
}

// CloseConnection closes an open connection with a close frame carrying
// reason (StatusPolicyViolation), as API Gateway's DeleteConnection does in
// AWS; a connection that is not open is already closed. The closing
// handshake runs in the background (the library bounds it to 5 s, then cuts
// the connection): a peer that does not answer it cannot hold up the caller.
func (l *LocalSockets) CloseConnection(_ context.Context, conn ConnectionID, reason string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conns[conn]
	if c == nil {
		return nil
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		_ = c.Close(websocket.StatusPolicyViolation, reason)
	}()
	return nil
}

// Close closes every open connection, as when the stack stops, and waits
// for their handlers.
func (l *LocalSockets) Close() {
	l.mu.Lock()
	for _, c := range l.conns {
		_ = c.Close(websocket.StatusGoingAway, "the service is stopping")
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// CloseAll cuts every open connection without a close frame, as a network
// failure would: tests make nodes reconnect with it.
func (l *LocalSockets) CloseAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.CloseNow()
	}
}

// Connections returns how many connections are open.
func (l *LocalSockets) Connections() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// ServeHTTP opens a connection for a node credential.
func (l *LocalSockets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := l.auth.Authenticate(r.Context(), r.Header.Get("Authorization"), httpapi.PeerAddr(r))
	if err == nil && p.Credential != domain.CredentialNode {
		err = domain.Errorf(domain.CodeForbidden, "the node protocol takes a node credential")
	}
	if err != nil {
		httpapi.WriteError(w, r, l.socket.log, err)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the request
	}
	ws.SetReadLimit(MaxMessageBytes)
	var b [12]byte
	_, _ = rand.Read(b[:])
	c := Conn{ID: ConnectionID(hex.EncodeToString(b[:])), Principal: p}
	l.mu.Lock()
	l.conns[c.ID] = ws
	l.wg.Add(1)
	l.mu.Unlock()
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, c.ID)
		l.mu.Unlock()
		_ = ws.CloseNow()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), 5*time.Second)
		defer cancel()
		_ = l.socket.Disconnect(dctx, c)
	}()
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for {
		typ, msg, err := ws.Read(l.ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			out, end := l.socket.Answer(l.ctx, c, msg)
			if out != nil {
				_ = ws.Write(l.ctx, websocket.MessageText, out)
			}
			if end {
				_ = l.CloseConnection(l.ctx, c.ID, ReasonRevoked)
			}
		}()
	}
}
