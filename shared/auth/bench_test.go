package auth_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

// countedEnv serves one authenticated no-op route through the real stack, with
// a call counter on the DynamoDB client the authenticator uses.
func countedEnv(tb testing.TB) (*apitest.Env, *store.CallCounter) {
	e := apitest.New(tb, nil)
	e.NotAPI = true // /v1/ping is a fixture of this test, not an API route
	counter := store.NewCallCounter()
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	e.Auth = auth.New(counted, e.Clock, e.Log)
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: e.Auth}, []httpapi.Route{{
		Method: http.MethodGet, Path: "/v1/ping", Access: httpapi.Member,
		Handler: func(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
			httpapi.WriteJSON(w, http.StatusOK, map[string]string{"org": p.OrgID})
			return nil
		},
	}})
	return e, counter
}

// TestAuthCostsOneRoundTrip pins the cost model the benchmark reports: one
// BatchGetItem per request, plus a lastUsed write at most once a minute.
func TestAuthCostsOneRoundTrip(t *testing.T) {
	e, counter := countedEnv(t)
	for i := 0; i < 120; i++ { // two minutes of requests, one a second
		if r := e.Do(http.MethodGet, "/v1/ping", apitest.AliceToken, nil); r.Status != 200 {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
		e.Clock.Advance(time.Second)
	}
	got := counter.Counts()
	if got["BatchGetItem"] != 120 {
		t.Errorf("BatchGetItem %d, want one per request", got["BatchGetItem"])
	}
	if got["UpdateItem"] > 3 {
		t.Errorf("lastUsed written %d times in two minutes", got["UpdateItem"])
	}
	if counter.Total() != got["BatchGetItem"]+got["UpdateItem"] {
		t.Errorf("unexpected calls: %v", got)
	}
}

func BenchmarkAuthenticatedRequest(b *testing.B) {
	e, counter := countedEnv(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := e.Do(http.MethodGet, "/v1/ping", apitest.AliceToken, nil); r.Status != 200 {
			b.Fatalf("status %d", r.Status)
		}
		e.Clock.Advance(100 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(counter.Total())/float64(b.N), "ddbcalls/op")
	b.ReportMetric(float64(counter.Counts()["UpdateItem"])/float64(b.N), "lastUsedWrites/op")
}
