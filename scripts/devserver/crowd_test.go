package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
)

// crowdLeases is how many leases each round asks for at once, and
// crowdRounds how many rounds run; sleeper's quota (3) refuses most.
const (
	crowdLeases = 50
	crowdRounds = 4
)

// The local stack survives a crowd: rounds of 50 leases at once, while its
// background jobs (the sweep, the offers, the node agents) run, each answered
// with a lease or a quota refusal and never a server error; after each round
// every route still answers and the leases end. Run under -race (the
// DynamoDB emulator is in-process): docs/local.md, "A crowd of leases".
func TestCrowdOfLeases(t *testing.T) {
	if devstack.TestKind() != devstack.KindMinidyn {
		// What broke was minidyn's (docs/local.md); DynamoDB Local's pass
		// would double the minutes for nothing it could show.
		t.Skip("the crowd runs in the minidyn pass")
	}
	base := startDevserverWith(t, func(o *options) { o.sweep = 100 * time.Millisecond })
	bob := api{t: t, base: base, token: apitest.BobToken}
	for round := range crowdRounds {
		start := time.Now()
		var (
			mu      sync.Mutex
			leased  []string
			refused int
			wg      sync.WaitGroup
		)
		for range crowdLeases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, id := lease(t, base, apitest.BobToken, "sleeper")
				mu.Lock()
				defer mu.Unlock()
				switch status {
				case http.StatusCreated:
					leased = append(leased, id)
				case http.StatusTooManyRequests:
					refused++
				default:
					t.Errorf("round %d: a lease answered %d", round, status)
				}
			}()
		}
		wg.Wait()
		if len(leased) == 0 || len(leased) > 3 || len(leased)+refused != crowdLeases {
			t.Fatalf("round %d: %d leased, %d refused of %d (sleeper's quota is 3)", round, len(leased), refused, crowdLeases)
		}
		// Every route still answers: the one that reads only the token,
		// and listings that query the table.
		for _, path := range []string{"/v1/whoami", "/v1/environments", "/v1/quotas", "/v1/templates"} {
			if s := bob.do(http.MethodGet, path, nil, nil); s != http.StatusOK {
				t.Fatalf("round %d: GET %s answered %d after the crowd", round, path, s)
			}
		}
		for _, id := range leased {
			if s := bob.do(http.MethodDelete, "/v1/environments/"+id, nil, nil); s != http.StatusOK {
				t.Fatalf("round %d: delete %s: %d", round, id, s)
			}
		}
		t.Logf("round %d: %d leased, %d refused, answered in %s", round, len(leased), refused, time.Since(start))
		for _, id := range leased {
			bob.waitState(id, domain.StateStopped, 2*time.Minute)
		}
		t.Logf("round %d: stopped after %s", round, time.Since(start))
	}
}

// lease asks for one environment of template and returns the status and,
// when it was created, its id; refusals are expected here, so unlike
// api.do it logs nothing.
func lease(t *testing.T, base, token, template string) (int, string) {
	body, _ := json.Marshal(map[string]any{"template": template})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/environments", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("lease: %v", err)
		return 0, ""
	}
	defer res.Body.Close()
	var out envAnswer
	if res.StatusCode == http.StatusCreated {
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Errorf("lease answer: %v", err)
		}
	}
	return res.StatusCode, out.Environment.ID
}
