package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/samples"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// The live metrics endpoint opens an environment's samples only to a ticket
// of kind metrics for its organization, node and environment; it answers
// the samples of the last since, as JSON lines, oldest first.
func TestMetricsEndpoint(t *testing.T) {
	key := bytes.Repeat([]byte{7}, ticket.KeySize)
	series := samples.New()
	now := time.Now().UTC()
	for i := 3; i >= 1; i-- {
		series.Add(domain.MetricSample{Time: now.Add(-time.Duration(i) * time.Minute), CPU: float64(i), Memory: int64(i) << 20, Processes: i})
	}
	h := agent.NewMetricsHandler(agent.MetricsConfig{
		Identity: func() (agent.TunnelIdentity, bool) {
			return agent.TunnelIdentity{Org: "acme", Node: "node_1", Key: key}, true
		},
		Series: func(env string) (*samples.Series, bool) { return series, env == "env_1" },
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	sign := func(c ticket.Claims) string {
		c.Exp = time.Now().Add(time.Minute).Unix()
		tk, err := ticket.Sign(key, c)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	good := ticket.Claims{Org: "acme", Env: "env_1", Node: "node_1", Open: ticket.OpenMetrics}
	get := func(tk, query string) (int, []domain.MetricSample) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/metrics?"+query, nil)
		if tk != "" {
			req.Header.Set("Authorization", "Bearer "+tk)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out []domain.MetricSample
		if res.StatusCode == http.StatusOK {
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				var x domain.MetricSample
				if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
					t.Fatal(err)
				}
				out = append(out, x)
			}
		}
		return res.StatusCode, out
	}
	logs := good
	logs.Open = ticket.OpenLogs
	other := good
	other.Env = "env_2"
	for _, tc := range []struct {
		name   string
		tk     string
		query  string
		status int
	}{
		{"no ticket", "", "env=env_1", http.StatusUnauthorized},
		{"a logs ticket", sign(logs), "env=env_1", http.StatusForbidden},
		{"another environment named", sign(good), "env=env_2", http.StatusForbidden},
		{"an environment not here", sign(other), "", http.StatusNotFound},
		{"an unknown parameter", sign(good), "env=env_1&offset=3", http.StatusBadRequest},
	} {
		if code, _ := get(tc.tk, tc.query); code != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.status)
		}
	}
	if code, got := get(sign(good), "env=env_1"); code != 200 || len(got) != 3 || got[0].CPU != 3 || got[2].CPU != 1 {
		t.Fatalf("the last 10 minutes: %d %+v", code, got)
	}
	if code, got := get(sign(good), "env=env_1&since=90s"); code != 200 || len(got) != 1 || got[0].Memory != 1<<20 {
		t.Fatalf("since 90s: %d %+v", code, got)
	}
}
