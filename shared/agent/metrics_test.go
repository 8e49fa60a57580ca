package agent_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// A container that holds 64 MiB shows about 64 MiB in its live metrics
// (runc's numbers, from its cgroup), and its history is kept once it ended.
// The shell that holds the 64 MiB stays (no exec): an exec would give the
// memory back at once, and only a sample taken while tr ran would see it.
func TestContainerMetrics(t *testing.T) {
	ref := busyboxRef(t)
	s := newStack(t, domain.Template{
		Name: "holder", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref},
		Command: []string{"sh", "-c", `x=$(head -c 67108864 /dev/zero | tr '\0' a); echo held; while :; do sleep 3600; done`},
	})
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.ReadyTimeout = time.Minute
		c.SampleEvery = time.Second
	})
	id := s.lease(t, "holder")
	s.waitLong(t, id, domain.StateReady)
	var x domain.MetricSample
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		r := s.Do("GET", "/v1/environments/"+id+"/metrics", apitest.BobToken, nil)
		var m environments.Metrics
		r.JSON(t, &m)
		if r.Status != 200 || m.Live == nil {
			t.Fatalf("metrics: %d %s", r.Status, r.Body)
		}
		req, _ := http.NewRequest("GET", m.Live.URL+"?env="+id+"&since=1m", nil)
		req.Header.Set("Authorization", "Bearer "+m.Live.Ticket)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
				t.Fatalf("%v: %s", err, sc.Bytes())
			}
		}
		res.Body.Close()
		if x.Memory >= 60<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample holds 64 MiB: last %+v", x)
		}
	}
	if x.Memory > 200<<20 || x.Processes < 1 {
		t.Fatalf("a container holding 64 MiB: %+v", x)
	}
	t.Logf("live sample: %+v", x)
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 && r.Status != 202 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	s.waitLong(t, id, domain.StateStopped)
	r := s.Do("GET", "/v1/environments/"+id+"/metrics", apitest.BobToken, nil)
	var m environments.Metrics
	r.JSON(t, &m)
	peak := int64(0)
	for _, y := range m.History {
		peak = max(peak, y.Memory)
	}
	if len(m.History) == 0 || peak < 60<<20 || !strings.HasPrefix(string(m.State), "stopped") {
		t.Fatalf("kept history: %s", r.Body)
	}
}
