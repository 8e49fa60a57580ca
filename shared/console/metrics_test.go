package console_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// An environment's page draws its metrics (CPU, memory, processes as SVG
// sparklines): live while it runs, read again every 5 s through the API,
// and the history its node kept once it ended.
func TestConsoleEnvironmentMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	var r struct {
		Environment struct {
			ID string `json:"id"`
		} `json:"environment"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "sleeper"}, &r)
	id := r.Environment.ID
	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "the running environment", chromedp.Navigate(stack.URL+"/#/environments/"+id))

	// Its node samples every 5 s, and the page reads them again through
	// the API every 5 s: the sparklines grow while it runs.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if liveSamples(t, stack.URL, id) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two samples of %s", id)
		}
		time.Sleep(time.Second)
	}
	drawnLive := func(n int) string {
		return `(() => {
		const live = document.querySelector('#env-metrics-live')?.textContent || '';
		const lines = [...document.querySelectorAll('#env-metrics svg polyline')];
		const names = lines.map((l) => l.dataset.series).join(',');
		return live.startsWith('Live from node ') && names === 'cpu,memory,processes' &&
			lines.every((l) => l.getAttribute('points').split(' ').length >= ` + strconv.Itoa(n) + `);
	})()`
	}
	b.until(t, "its live samples drawn", drawnLive(2))
	b.until(t, "a later sample drawn without reloading the page", drawnLive(liveSamples(t, stack.URL, id)+1))
	b.shot(t, "environment-metrics-live")
	apiCall(t, stack.URL, clienttest.BobToken, "DELETE", "/v1/environments/"+id, nil, nil)
	for {
		var e domain.Environment
		apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/environments/"+id, nil, &e)
		if e.State == domain.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s", id, e.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.until(t, "its kept history drawn", `(() => {
		const lines = [...document.querySelectorAll('#env-metrics svg polyline')];
		const names = lines.map((l) => l.dataset.series).join(',');
		return names === 'cpu,memory,processes' && lines.every((l) => l.getAttribute('points').split(' ').length >= 2);
	})()`)
	b.shot(t, "environment-metrics")
}

// liveSamples counts the samples the node serves of a running environment
// (0 while it is pending).
func liveSamples(t *testing.T, base, id string) int {
	t.Helper()
	c, err := client.New(base, clienttest.BobToken)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	m, err := c.ReadMetrics(context.Background(), id, client.MetricsOptions{}, func(domain.MetricSample) error { n++; return nil })
	if err != nil || m.Live == nil {
		return 0
	}
	return n
}
