package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// What single operations write, partition by partition: a touch writes the
// environment's item alone (its organization's key, 1 unit); the job moving a
// touched environment's due entry writes the item and the entry's delete and
// put in its shard; a lease writes its organization's key and one entry in
// each index, and its event (the outbox: the organization's event key, an
// entry in the kind's and the subject's listing, and one in an outbox shard),
// none of them a key shared by every organization.
var outboxShard = regexp.MustCompile(`WHDUE#[0-9]+ `)

func TestWritesPerOperation(t *testing.T) {
	ctx := context.Background()
	e := apitest.New(t, nil)
	a := newActor(e, "x")
	svc := environments.NewService(a.st, e.Clock)
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember, Credential: domain.CredentialCLI}
	written := func() string {
		var out []string
		for _, p := range a.calls.Partitions() {
			out = append(out, fmt.Sprintf("%s %s %d/%d", p.Where, p.Key, p.Writes, p.Units))
		}
		a.calls.ResetWrites()
		return fmt.Sprint(out)
	}

	res, err := svc.Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var l environments.Leased
	if err := json.Unmarshal(res.Body, &l); err != nil {
		t.Fatal(err)
	}
	id, shard := l.Environment.ID, e.Store.EnvDuePartition("acme", l.Environment.ID)
	// The transaction: the quota item, the environment and the condition
	// on the organization's budgets item (docs/usage.md, Budgets) on the
	// organization's key (2 units each), one entry in each index; the
	// environment.leased event on the organization's event key, with its
	// listing entries and its outbox entry (the shard follows the event's id,
	// which the answer does not carry: written as WHDUE#n).
	want := fmt.Sprint([]string{"table ORG#acme 3/6", "table EVT#acme 1/2",
		"GSI1 EVT#acme#environment 1/1", "GSI1 ORG#acme#ENV#live 1/1",
		"GSI2 " + shard + " 1/1", "GSI2 WHDUE#n 1/1",
		"GSI3 EVT#acme#environment/" + id + " 1/1", "GSI3 POOL#acme#local#pending 1/1"})
	if got := outboxShard.ReplaceAllString(written(), "WHDUE#n "); got != want {
		t.Errorf("lease wrote %s, want %s", got, want)
	}

	e.Clock.Advance(5 * time.Minute)
	if _, err := svc.Touch(ctx, bob, id); err != nil {
		t.Fatal(err)
	}
	if got, want := written(), fmt.Sprint([]string{"table ORG#acme 1/1"}); got != want {
		t.Errorf("touch wrote %s, want %s", got, want)
	}

	cur, err := a.st.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.st.ReindexEnvironment(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if got, want := written(), fmt.Sprint([]string{"GSI2 " + shard + " 2/2", "table ORG#acme 1/1"}); got != want {
		t.Errorf("moving the due entry wrote %s, want %s", got, want)
	}
}
