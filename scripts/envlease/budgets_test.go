package main

import (
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// envlease budgets group enables a grouping, usage --by shows it (csv too),
// and a spent budget refuses leases with the quota's exit code.
func TestUsageByLabelAndBudgets(t *testing.T) {
	s := clienttest.Start(t)
	alice := newUser(t, s)
	alice.login(clienttest.AliceToken)
	bob := newUser(t, s)
	bob.login(clienttest.BobToken)

	contains(t, "group", alice.ok("budgets", "group", "--by", "label:team"), "groupings", "template, label:team")
	var leased client.Leased
	bob.json(&leased, "lease", "--template", "shell", "--label", "team=red")

	csv := bob.ok("usage", "--by", "label:team", "--since", "0d", "-o", "csv")
	if lines := strings.Split(strings.TrimSpace(csv), "\n"); lines[0] != "day,label:team,seconds,cost" {
		t.Fatalf("csv:\n%s", csv)
	}
	var rep client.UsageReport
	bob.json(&rep, "usage", "--by", "label:team", "--filter", "label:team=red")
	if rep.By != "label:team" || rep.Filter != "label:team=red" {
		t.Fatalf("report %+v", rep)
	}
	if r := bob.fails(2, "", "usage", "-o", "yaml"); !strings.Contains(r.stderr, "-o") {
		t.Fatalf("bad -o: %s", r.stderr)
	}
	if r := bob.fails(2, "", "ls", "-o", "csv"); !strings.Contains(r.stderr, "csv") {
		t.Fatalf("csv elsewhere: %s", r.stderr)
	}

	// A budget of one second on team red is spent once the lease has run a
	// second; setting it judges it at once.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out := alice.ok("budgets", "set", "red", "--scope", "label:team=red", "--period", "day", "--limit", "1s", "-o", "json")
		if strings.Contains(out, `"exhausted": true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget never spent: %s", out)
		}
	}
	r := bob.fails(exitQuota, "", "lease", "--template", "shell", "--label", "team=red")
	if !strings.Contains(r.stderr, `budget "red"`) {
		t.Fatalf("refused lease: %s", r.stderr)
	}
	contains(t, "budgets ls", bob.ok("budgets", "ls"), "ID", "red", "label:team=red", "spent: leases refused")
	alice.ok("budgets", "rm", "red")
	bob.ok("rm", leased.Environment.ID)
}
