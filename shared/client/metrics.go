package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Metrics says where an environment's metrics are (GET
// /v1/environments/{id}/metrics): Live while it runs (read them from its
// node), History once it ended.
type Metrics struct {
	Environment string                `json:"environment"`
	State       string                `json:"state"`
	Live        *LiveLog              `json:"live,omitempty"`
	History     []domain.MetricSample `json:"history"`
}

// EnvironmentMetrics asks where an environment's metrics are. Nothing is
// stored, so it is retried after a 502 or 503.
func (c *Client) EnvironmentMetrics(ctx context.Context, id string) (Metrics, error) {
	var out Metrics
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id) + "/metrics", retry: true}, &out)
	return out, err
}

// MetricsOptions choose what ReadMetrics reads.
type MetricsOptions struct {
	// Since is how far back the live samples start (0: the node's
	// default, 10 minutes).
	Since time.Duration
	// Follow keeps reading new samples, every few seconds, until the
	// environment ends or ctx does.
	Follow bool
}

// ErrMetricsNotLive says the node no longer serves the environment's
// metrics: it ended; ask again for its history.
var ErrMetricsNotLive = errors.New("the environment's metrics are no longer served by its node")

// ReadMetrics calls fn with each sample of an environment: the live ones
// from its node while it runs (with Follow, until it ends), its kept
// history once it ended. It reports the Metrics answer it read.
func (c *Client) ReadMetrics(ctx context.Context, id string, opt MetricsOptions, fn func(domain.MetricSample) error) (Metrics, error) {
	m, err := c.EnvironmentMetrics(ctx, id)
	if err != nil {
		return m, err
	}
	if m.Live == nil {
		for _, x := range m.History {
			if err := fn(x); err != nil {
				return m, err
			}
		}
		return m, nil
	}
	q := url.Values{"env": {id}}
	if opt.Since > 0 {
		q.Set("since", opt.Since.String())
	}
	if opt.Follow {
		q.Set("follow", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Live.URL+"?"+q.Encode(), nil)
	if err != nil {
		return m, err
	}
	req.Header.Set("Authorization", "Bearer "+m.Live.Ticket)
	req.Header.Set("User-Agent", c.userAgent)
	// A follow lasts as long as the environment: no overall timeout.
	res, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return m, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return m, ErrMetricsNotLive
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		return m, fmt.Errorf("live metrics: %s: %s", res.Status, b)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var x domain.MetricSample
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return m, fmt.Errorf("live metrics: %w", err)
		}
		if err := fn(x); err != nil {
			return m, err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return m, err
	}
	return m, nil
}
