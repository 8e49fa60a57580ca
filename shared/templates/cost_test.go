package templates_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/templates"
)

// GET /v1/quotas is authentication plus one query of the quota items, which
// carry the limit, the live count and the template's timeouts together.
func TestQuotasIsAuthReadPlusOneQuery(t *testing.T) {
	e := apitest.New(t, nil)
	counter := store.NewCallCounter()
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: auth.New(counted, e.Clock, e.Log)},
		templates.QuotaRoutes(templates.NewService(counted)))
	e.Do(http.MethodGet, "/v1/quotas", apitest.AliceToken, nil) // first use writes lastUsed
	counter.Reset()
	res := e.Do(http.MethodGet, "/v1/quotas", apitest.AliceToken, nil)
	if res.Status != http.StatusOK {
		t.Fatalf("%d %s", res.Status, res.Body)
	}
	if got := counter.Counts(); counter.Total() != 2 || got["BatchGetItem"] != 1 || got["Query"] != 1 {
		t.Fatalf("DynamoDB calls %v, want one BatchGetItem and one Query", got)
	}
}
