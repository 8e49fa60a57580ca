package federation_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

// What an exchange costs in DynamoDB calls, with the issuer's documents
// cached: the address's block (one BatchGetItem), the organization's
// issuers (one Query), its lifetime cap (one GetItem) and the token with
// its event (one TransactWriteItems). A refusal reads the issuers too,
// and writes its event (one PutItem) and the address's failure count (one
// UpdateItem).
func TestExchangeCalls(t *testing.T) {
	f := newFedEnv(t)
	counter := store.NewCallCounter()
	counted := f.Store.WithClient(dynamodb.New(f.Store.DB().Options(), counter.Option))
	guard := webhooks.Guard{AllowLocal: true}
	svc := federation.NewService(counted, f.Clock, guard, federation.NewVerifiers(guard.Client(10*time.Second, nil), f.Clock), f.Log)
	f.Handler = httpapi.New(httpapi.Config{Logger: f.Log, Auth: f.Auth}, federation.Routes(svc))
	// The first exchange fetches the issuer's documents.
	if r := f.exchange(sign(t, f.k1, f.claims())); r.Status != http.StatusCreated {
		t.Fatalf("warm-up: %d %s", r.Status, r.Body)
	}
	cases := []struct {
		name   string
		token  func() string
		status int
		want   map[string]int
	}{
		{"granted", func() string { return sign(t, f.k1, f.claims()) }, http.StatusCreated,
			map[string]int{"BatchGetItem": 1, "Query": 1, "GetItem": 1, "TransactWriteItems": 1}},
		{"refused", func() string { return sign(t, f.k1, with(f.claims(), "aud", "other")) }, http.StatusUnauthorized,
			map[string]int{"BatchGetItem": 1, "Query": 1, "PutItem": 1, "UpdateItem": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			counter.Reset()
			if r := f.exchange(c.token()); r.Status != c.status {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			got := counter.Counts()
			if len(got) != len(c.want) {
				t.Fatalf("calls %v, want %v", got, c.want)
			}
			for op, n := range c.want {
				if got[op] != n {
					t.Fatalf("calls %v, want %v", got, c.want)
				}
			}
		})
	}
}
