package environments

import (
	"context"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// metricsRoutes are an environment's metrics (docs/environments.md,
// "Metrics").
func metricsRoutes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodGet, Path: "/v1/environments/{id}/metrics", Access: httpapi.Member, Handler: s.handleMetrics},
		{Method: http.MethodGet, Path: "/v1/environments/{id}/metrics/recent", Access: httpapi.Member, Handler: s.handleRecentMetrics},
	}
}

// Metrics is the answer to GET /v1/environments/{id}/metrics: while it runs
// on a node, Live (its samples every few seconds, read on the node with the
// ticket); once it ended, History (the coarse history its node kept of its
// whole life; empty when its node kept none).
type Metrics struct {
	Environment string                `json:"environment"`
	State       domain.State          `json:"state"`
	Live        *LiveLog              `json:"live,omitempty"`
	History     []domain.MetricSample `json:"history"`
}

// Metrics says where an environment's metrics are: one read of the
// environment and one of its node while it runs, one of the environment and
// one of its kept history once it ended.
func (s *Service) Metrics(ctx context.Context, p domain.Principal, id string) (Metrics, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return Metrics{}, err
	}
	out := Metrics{Environment: e.ID, State: e.State, History: []domain.MetricSample{}}
	switch {
	case e.State == domain.StatePending || (e.State.Live() && e.Node == ""):
		return Metrics{}, domain.Errorf(domain.CodeConflict, "environment %s is pending: its metrics begin once a node runs it; ask again shortly", e.ID)
	case e.State.Live():
		live, err := s.liveOnNode(ctx, p, e, "live metrics", tunnel.MetricsURL, ticket.OpenMetrics)
		if err != nil {
			return Metrics{}, err
		}
		out.Live = &live
		return out, nil
	}
	h, err := s.store.GetEnvMetrics(ctx, p.OrgID, e.ID)
	if err != nil {
		return Metrics{}, err
	}
	if h != nil {
		out.History = h
	}
	return out, nil
}

func (s *Service) handleMetrics(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	for k := range r.URL.Query() {
		return domain.BadRequest(k, "unknown query parameter %q: since and follow are the node's (live)", k)
	}
	m, err := s.Metrics(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The ticket opens the metrics to whoever holds it.
	httpapi.WriteSecret(w, http.StatusOK, m)
	return nil
}
