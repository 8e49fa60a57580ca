package agent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/agent/samples"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// MetricsConfig configures a live metrics endpoint.
type MetricsConfig struct {
	// Identity is the agent's current identity, as for tunnels.
	Identity func() (TunnelIdentity, bool)
	// Series returns the samples of an environment the agent runs.
	Series func(env string) (*samples.Series, bool)
	// Every is how often samples are taken, how often a follower is sent
	// the new ones.
	Every time.Duration
	Clock clock.Clock
	Log   *slog.Logger
	// MaxReaders bounds the reads served at once (DefaultMaxLogReaders).
	MaxReaders int
}

// MetricsHandler serves an environment's live metrics at tunnel.MetricsPath
// to the holder of a ticket of kind metrics naming it:
//
//	GET /metrics?env=ID[&since=DURATION][&follow=true]
//
// The answer is JSON lines (application/x-ndjson), one domain.MetricSample
// each, oldest first: those of the last DURATION (default 10m; the node
// keeps 30 minutes), and with follow each new sample as it is taken, until
// the environment ends here or the client leaves.
type MetricsHandler struct {
	cfg     MetricsConfig
	readers atomic.Int64
}

// NewMetricsHandler returns a live metrics endpoint.
func NewMetricsHandler(cfg MetricsConfig) *MetricsHandler {
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultSampleEvery
	}
	if cfg.MaxReaders <= 0 {
		cfg.MaxReaders = DefaultMaxLogReaders
	}
	return &MetricsHandler{cfg: cfg}
}

func (h *MetricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeRefusal(w, refusal{http.StatusMethodNotAllowed, "metrics are read with GET"})
		return
	}
	q := r.URL.Query()
	since, follow := 10*time.Minute, false
	for k := range q {
		var err error
		switch k {
		case "env":
		case "since":
			var d domain.Duration
			if d, err = domain.ParseDuration(q.Get(k)); err != nil || d < 0 {
				err = fmt.Errorf("since must be a duration such as 5m")
			}
			since = d.Std()
		case "follow":
			if follow, err = strconv.ParseBool(q.Get(k)); err != nil {
				err = fmt.Errorf("follow must be true or false")
			}
		default:
			err = fmt.Errorf("unknown query parameter %q: metrics take env, since and follow", k)
		}
		if err != nil {
			writeRefusal(w, refusal{http.StatusBadRequest, err.Error()})
			return
		}
	}
	c, ref := checkTicket(r, h.cfg.Identity, h.cfg.Clock, ticket.OpenMetrics, "metrics", q.Get("env"))
	if ref != nil {
		h.cfg.Log.Info("live metrics refused", "status", ref.status, "reason", ref.msg, "from", r.RemoteAddr)
		writeRefusal(w, *ref)
		return
	}
	series, ok := h.cfg.Series(c.Env)
	if !ok {
		writeRefusal(w, refusal{http.StatusNotFound, "environment " + c.Env + " no longer runs on this node: read its kept history (GET /v1/environments/{id}/metrics)"})
		return
	}
	if h.readers.Add(1) > int64(h.cfg.MaxReaders) {
		h.readers.Add(-1)
		writeRefusal(w, refusal{http.StatusServiceUnavailable, fmt.Sprintf("the node serves %d metrics reads already; retry later", h.cfg.MaxReaders)})
		return
	}
	defer h.readers.Add(-1)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	last := h.cfg.Clock.Now().Add(-since)
	send := func() error {
		for _, x := range series.Since(last) {
			if err := enc.Encode(x); err != nil {
				return err
			}
			last = x.Time
		}
		return rc.Flush()
	}
	if err := send(); err != nil || !follow {
		return
	}
	t := time.NewTicker(h.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		if _, ok := h.cfg.Series(c.Env); !ok {
			return // it ended here
		}
		_ = rc.SetWriteDeadline(time.Now().Add(logWriteStall))
		if err := send(); err != nil {
			return
		}
	}
}

// checkTicket checks the ticket of a request to one of the endpoint's
// reading routes (open: its kind; what: what it opens, in words; env: the
// environment the query names, if any).
func checkTicket(r *http.Request, identity func() (TunnelIdentity, bool), clk clock.Clock, open, what, env string) (ticket.Claims, *refusal) {
	tk, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tk) == "" {
		return ticket.Claims{}, &refusal{http.StatusUnauthorized, "live " + what + " take a ticket (GET /v1/environments/{id}/" + what + ") as Authorization: Bearer <ticket>"}
	}
	id, ok := identity()
	if !ok {
		return ticket.Claims{}, &refusal{http.StatusServiceUnavailable, "the node is not registered yet; retry shortly"}
	}
	c, err := ticket.Verify(id.Key, strings.TrimSpace(tk), clk.Now())
	if err != nil {
		return ticket.Claims{}, &refusal{http.StatusUnauthorized, err.Error()}
	}
	switch {
	case c.Open != open:
		return ticket.Claims{}, &refusal{http.StatusForbidden, "the ticket does not open " + what}
	case c.Org != id.Org:
		return ticket.Claims{}, &refusal{http.StatusForbidden, "the ticket is for another organization"}
	case c.Node != id.Node:
		return ticket.Claims{}, &refusal{http.StatusForbidden, "the ticket is for node " + c.Node + ", not this one"}
	case env != "" && env != c.Env:
		return ticket.Claims{}, &refusal{http.StatusForbidden, "the ticket is for environment " + c.Env + ", not " + env}
	}
	return c, nil
}
