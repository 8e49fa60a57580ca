package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/nodes"
)

// Revoking a node credential on the local stack closes the WebSockets it
// holds: the one its node said hello on is closed by the revocation itself
// (a close frame naming the reason), and those that never said hello (so no
// record names them) are closed by their first message of any kind, which
// is refused and creates nothing. The credential opens no new one, and its
// node is ended (lost) by the revocation.
func TestRevokingANodeCredentialClosesItsSockets(t *testing.T) {
	var sockets *nodes.LocalSockets
	base := startDevserverWith(t, func(o *options) { o.sockets = func(l *nodes.LocalSockets) { sockets = l } })
	agents := 0
	for _, o := range demoOrgs(t) {
		agents += len(o)
	}
	waitUntil(t, "every agent connected", func() bool { return sockets.Connections() == agents })
	alice := api{t: t, base: base, token: apitest.AliceToken}
	var issued struct {
		Token  string `json:"token"`
		APIKey struct {
			ID string `json:"id"`
		} `json:"apiKey"`
	}
	if s := alice.do("POST", "/v1/nodes/credentials", map[string]any{"pool": "local", "name": "doomed"}, &issued); s != 201 {
		t.Fatalf("issue a node credential: %d", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := "ws" + strings.TrimPrefix(base, "http") + nodes.SocketPath
	dial := func() (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + issued.Token}}})
	}
	// next reads the connection's next message that is not an offer.
	next := func(ws *websocket.Conn) (nodes.Message, error) {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return nodes.Message{}, err
			}
			var m nodes.Message
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("message %q: %v", b, err)
			}
			if m.Type != nodes.MsgOffer {
				return m, nil
			}
		}
	}
	send := func(ws *websocket.Conn, m nodes.Message) {
		b, _ := json.Marshal(m)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("send %s: %v", m.Type, err)
		}
	}
	closedForRevocation := func(what string, err error) {
		t.Helper()
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != nodes.ReasonRevoked {
			t.Fatalf("%s: read ended with %v, want a close for the revocation", what, err)
		}
	}

	hello, _, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer hello.CloseNow()
	send(hello, nodes.Message{Type: nodes.MsgHello, ID: "1", Register: &nodes.RegisterRequest{Name: "doomed", Address: "127.0.0.1", Capacity: 1}})
	reg, err := next(hello)
	if err != nil || reg.Type != nodes.MsgRegistered {
		t.Fatalf("hello: %+v %v", reg, err)
	}
	// Connections that never said hello (so no record names them), one for
	// each kind of message sent after the revocation.
	later := []nodes.Message{
		{Type: nodes.MsgHello, Register: &nodes.RegisterRequest{Name: "again", Address: "127.0.0.1", Capacity: 1}},
		{Type: nodes.MsgHello, Node: reg.Node},
		{Type: nodes.MsgHeartbeat, Node: reg.Node},
		{Type: nodes.MsgClaim, Node: reg.Node},
		{Type: nodes.MsgReport, Node: reg.Node, Environment: "env_probe", Report: &nodes.Report{State: "failed", Error: "planted"}},
	}
	silent := make([]*websocket.Conn, len(later))
	for i := range later {
		if silent[i], _, err = dial(); err != nil {
			t.Fatal(err)
		}
		defer silent[i].CloseNow()
	}
	waitUntil(t, "the credential's connections open", func() bool { return sockets.Connections() == agents+1+len(later) })
	var before struct {
		Nodes []struct{ ID string } `json:"nodes"`
	}
	alice.do("GET", "/v1/nodes", nil, &before)

	revoked := time.Now()
	if s := alice.do("DELETE", "/v1/keys/"+issued.APIKey.ID, nil, nil); s != 200 {
		t.Fatalf("revoke: %d", s)
	}
	// The revocation closed the connection its node said hello on.
	_, err = next(hello)
	closedForRevocation("the hello connection", err)
	t.Logf("the connection was closed %s after the revocation was sent", time.Since(revoked).Round(time.Millisecond))

	// Every other one is refused at its first message, then closed.
	for i, m := range later {
		m.ID = "later"
		send(silent[i], m)
		refused, err := next(silent[i])
		if err != nil || refused.Type != nodes.MsgError || refused.Error.Status != 401 || refused.ID != "later" {
			t.Fatalf("%s after the revoke: %+v %v", m.Type, refused, err)
		}
		_, err = next(silent[i])
		closedForRevocation("a silent connection", err)
	}
	var after struct {
		Nodes []struct{ ID, State string } `json:"nodes"`
	}
	alice.do("GET", "/v1/nodes", nil, &after)
	if len(after.Nodes) != len(before.Nodes) {
		t.Fatalf("%d nodes after the refused messages, %d before", len(after.Nodes), len(before.Nodes))
	}
	// The revocation ended the credential's node, as a lost node is ended.
	for _, n := range after.Nodes {
		if n.ID == reg.Node && n.State != "lost" {
			t.Fatalf("the revoked credential's node is %s, want lost", n.State)
		}
	}
	waitUntil(t, "only the agents' connections open", func() bool { return sockets.Connections() == agents })

	// And it opens no new one.
	if ws, res, err := dial(); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		if ws != nil {
			ws.CloseNow()
		}
		t.Fatalf("a new connection with the revoked credential: %v %v", res, err)
	}
}
