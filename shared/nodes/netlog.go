package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
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

// MaxRefusalsShown bounds the refusals one environment.network.refused
// event lists (it counts them all).
const MaxRefusalsShown = 10

// NetRefusals is the body of POST /v1/nodes/{id}/environments/{env}/network-refused:
// how many connections and DNS questions the environment's boundary refused
// since the node last said, and the first of them.
type NetRefusals struct {
	Count    int          `json:"count"`
	Refusals []NetRefusal `json:"refusals"`
}

// NetRefusal is one refused connection or DNS question, as the network log
// records it.
type NetRefusal struct {
	Time  time.Time `json:"time"`
	Proto string    `json:"proto"`
	Addr  string    `json:"addr,omitempty"`
	Port  uint16    `json:"port,omitempty"`
	Name  string    `json:"name,omitempty"`
	Rule  string    `json:"rule"`
}

// ReportRefusals writes one environment.network.refused event of the
// environment's organization, so webhooks can alert on what its network
// rules refused. The agent sends at most one every few seconds per
// environment.
func (s *Service) ReportRefusals(ctx context.Context, p domain.Principal, nodeID, envID string, req NetRefusals) error {
	es, ok := s.store.(interface {
		PutEvent(ctx context.Context, ev domain.Event) error
	})
	if !ok {
		return domain.Errorf(domain.CodeUnavailable, "this API records no events")
	}
	if req.Count < 1 || len(req.Refusals) > MaxRefusalsShown || len(req.Refusals) > req.Count {
		return domain.Invalid("count", "count must be at least 1 and refusals at most %d (and at most count)", MaxRefusalsShown)
	}
	for i, r := range req.Refusals {
		if len(r.Proto) > 8 || len(r.Addr) > 64 || len(r.Name) > 253 || len(r.Rule) > 600 {
			return domain.Invalid(fmt.Sprintf("refusals[%d]", i), "a refusal's fields are too long")
		}
	}
	n, e, err := s.nodeEnv(ctx, p, nodeID, envID)
	if err != nil {
		return err
	}
	if req.Refusals == nil {
		req.Refusals = []NetRefusal{}
	}
	ev := domain.NewEvent(ctx, domain.EventEnvNetRefused, n.OrgID, domain.Subject{Kind: "environment", ID: e.ID}, s.clock.Now(),
		map[string]any{"count": req.Count, "refusals": req.Refusals, "node": n.ID})
	return es.PutEvent(ctx, ev)
}

func (s *Service) handleRefusals(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req NetRefusals
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	if err := s.ReportRefusals(r.Context(), p, r.PathValue("id"), r.PathValue("env"), req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
