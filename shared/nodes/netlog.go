package nodes

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
)

// logKind is which log of an environment a node keeps: its log (the
// default) or, with ?kind=network, its network log (docs/nodes.md,
// "Network boundary"), each an artifact linked from its own field.
type logKind struct {
	name, contentType string
	field             func(*domain.Environment) *string
}

var (
	envLog     = logKind{"log", "text/plain; charset=utf-8", func(e *domain.Environment) *string { return &e.Log }}
	networkLog = logKind{"network log", "application/x-ndjson", func(e *domain.Environment) *string { return &e.NetworkLog }}
)

// logKindOf reads the kind a request names.
func logKindOf(r *http.Request) (logKind, error) {
	q := r.URL.Query()
	for k := range q {
		if k != "kind" {
			return logKind{}, domain.BadRequest(k, "unknown query parameter %q: a kept log takes only kind", k)
		}
	}
	switch q.Get("kind") {
	case "", "log":
		return envLog, nil
	case "network":
		return networkLog, nil
	}
	return logKind{}, domain.BadRequest("kind", "kind must be log (the default) or network")
}

// MsgNetwork (service -> node, unasked): the environment's own network
// layer changed (Message.Network, nil for none); the node applies it to the
// environment's boundary at once, closing the connections it refuses.
const MsgNetwork = "network"

// TellNetwork pushes e's network layer to its node, as stops and checkpoint
// orders are pushed. A node without a connection, or a message lost, keeps
// the layer it has until its next claim of the environment reads it: the
// change is said to take effect on delivery (docs/nodes.md).
func (s *Stopper) TellNetwork(ctx context.Context, e domain.Environment) {
	if e.Node == "" {
		return // not claimed yet: the claim carries it
	}
	conn, err := s.store.NodeConnection(ctx, e.OrgID, e.Node, s.clock.Now())
	if err == nil && conn == "" {
		err = errNoConnection
	}
	if err == nil {
		n := e.Network
		if n == nil {
			n = &domain.EnvNetwork{}
		}
		var msg []byte
		if msg, err = json.Marshal(Message{Type: MsgNetwork, Node: e.Node, Environment: e.ID, Network: n}); err == nil {
			err = s.poster.Post(ctx, ConnectionID(conn), msg)
		}
	}
	if err != nil {
		s.log.WarnContext(ctx, "network rules not pushed", "environment", e.ID, "node", e.Node, "err", err.Error())
	}
}
