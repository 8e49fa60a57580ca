package environments

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/tunnel"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// The console draws a running environment's metrics, but its
// Content-Security-Policy lets the page reach the API alone, never a node.
// GET /v1/environments/{id}/metrics/recent relays the node's recent samples
// on the same origin (docs/environments.md, "Metrics"): the API reads them
// from the node's metrics endpoint with a ticket it signs, as a client would.
// Nothing is written: each call costs the environment's read and its node's,
// and one small request to the node, only while someone looks.

// Bounds of a relay of recent samples.
const (
	// DefaultRecent and MaxRecent bound since: the node keeps 30 minutes.
	DefaultRecent = 10 * time.Minute
	MaxRecent     = 30 * time.Minute
	// maxRecentSamples bounds the samples relayed (30 minutes at one
	// sample every 5 s is 360), and maxRecentBytes the node's answer.
	maxRecentSamples = 400
	maxRecentBytes   = 1 << 20
	// recentTimeout bounds the request to the node, well under the API
	// functions' timeout.
	recentTimeout = 4 * time.Second
)

// RecentMetrics is the answer to GET /v1/environments/{id}/metrics/recent.
type RecentMetrics struct {
	Environment string                `json:"environment"`
	State       domain.State          `json:"state"`
	Node        string                `json:"node"`
	Samples     []domain.MetricSample `json:"samples"`
}

// WithNodeHTTP sets the client the API reaches nodes' endpoints with (the
// relay of recent metrics); the default times out after recentTimeout.
func WithNodeHTTP(c *http.Client) Option { return func(s *Service) { s.nodeHTTP = c } }

// RecentMetrics relays the samples the node took of a running environment
// in the last since, oldest first. Pending is 409 as for GET …/metrics; an
// environment that no longer runs is 409 too (its history is GET
// …/metrics); a node that does not answer is 503.
func (s *Service) RecentMetrics(ctx context.Context, p domain.Principal, id string, since time.Duration) (RecentMetrics, error) {
	e, err := s.getActing(ctx, p, id)
	if err != nil {
		return RecentMetrics{}, err
	}
	if !e.State.Live() || e.Node == "" {
		return RecentMetrics{}, domain.Errorf(domain.CodeConflict, "environment %s is %s and runs on no node: GET /v1/environments/%s/metrics has its kept history once it ended", e.ID, e.State, e.ID)
	}
	live, err := s.liveOnNode(ctx, p, e, "live metrics", tunnel.MetricsURL, ticket.OpenMetrics)
	if err != nil {
		return RecentMetrics{}, err
	}
	out := RecentMetrics{Environment: e.ID, State: e.State, Node: e.Node, Samples: []domain.MetricSample{}}
	q := url.Values{"env": {e.ID}, "since": {since.String()}}
	rctx, cancel := context.WithTimeout(ctx, recentTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, live.URL+"?"+q.Encode(), nil)
	if err != nil {
		return RecentMetrics{}, domain.Internal(err)
	}
	req.Header.Set("Authorization", "Bearer "+live.Ticket)
	hc := http.Client{Timeout: recentTimeout}
	if s.nodeHTTP != nil {
		hc = *s.nodeHTTP
	}
	// The address is the node's to register, and the API asks it from
	// inside its own network: a redirect (to a metadata or internal
	// address) is the node's answer, not followed.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := hc.Do(req)
	if err != nil {
		return RecentMetrics{}, nodeUnavailable(e, err)
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotFound:
		return out, nil // the node no longer runs it, or has no sample yet
	case res.StatusCode != http.StatusOK:
		return RecentMetrics{}, nodeUnavailable(e, fmt.Errorf("%s", res.Status))
	}
	sc := bufio.NewScanner(io.LimitReader(res.Body, maxRecentBytes))
	for sc.Scan() {
		var x domain.MetricSample
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return RecentMetrics{}, nodeUnavailable(e, err)
		}
		out.Samples = append(out.Samples, x)
	}
	if err := sc.Err(); err != nil {
		return RecentMetrics{}, nodeUnavailable(e, err)
	}
	if n := len(out.Samples); n > maxRecentSamples {
		out.Samples = out.Samples[n-maxRecentSamples:]
	}
	return out, nil
}

func nodeUnavailable(e domain.Environment, err error) error {
	return &domain.Error{Code: domain.CodeUnavailable, RetryAfter: 5 * time.Second,
		Message: "node " + e.Node + ", which runs environment " + e.ID + ", did not answer for its metrics; ask again", Err: err}
}

func (s *Service) handleRecentMetrics(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	since := DefaultRecent
	for k, v := range r.URL.Query() {
		if k != "since" || len(v) != 1 {
			return domain.BadRequest(k, "unknown query parameter %q: recent metrics take since", k)
		}
		d, err := time.ParseDuration(v[0])
		if err != nil || d < 5*time.Second || d > MaxRecent {
			return domain.BadRequest("since", "since must be a duration from 5s to %s, such as 10m", MaxRecent)
		}
		since = d
	}
	m, err := s.RecentMetrics(r.Context(), p, r.PathValue("id"), since)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	httpapi.WriteJSON(w, http.StatusOK, m)
	return nil
}
