package environments_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
)

// BenchmarkGetEnvironmentOverhead compares GET /v1/environments/{id} end to
// end with the DynamoDB calls it makes, against the same minidyn:
//
//   - sdk: the raw calls only: the authentication BatchGetItem (token record
//     and caller address) and the environment's GetItem, strongly consistent,
//     with the SDK client the service uses.
//   - handler: the same request through the whole HTTP stack in process
//     (routing, authentication, the service, JSON).
//   - http: the same over a loopback TCP connection with net/http's client.
//
// handler/sdk is what the service adds to its own storage calls; docs/performance.md
// records the ratio.
func BenchmarkGetEnvironmentOverhead(b *testing.B) {
	e := apitest.New(b, func(e *apitest.Env) [][]httpapi.Route {
		return [][]httpapi.Route{environments.Routes(environments.NewService(e.Store, e.Clock))}
	})
	e.NotAPI = true // measured, not checked: the handler tests validate this response
	r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"})
	if r.Status != 201 {
		b.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	id := r.Map(b)["environment"].(map[string]any)["id"].(string)
	path := "/v1/environments/" + id
	// Warm lastUsed, so every measured request makes exactly the two calls.
	e.Do(http.MethodGet, path, apitest.BobToken, nil)

	ctx := context.Background()
	db, table := e.Store.DB(), e.Store.Table()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	batch := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{table: {
		ConsistentRead: aws.Bool(true),
		Keys: []map[string]types.AttributeValue{
			{"PK": s("ADDR#192.0.2.1"), "SK": s("ADDR")},
			{"PK": s("TOKEN#" + auth.HashToken(apitest.BobToken)), "SK": s("TOKEN")},
		},
	}}}
	get := &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": s("ORG#acme"), "SK": s("ENV#" + id)}}

	b.Run("sdk", func(b *testing.B) {
		for b.Loop() {
			out, err := db.BatchGetItem(ctx, batch)
			if err != nil || len(out.Responses[table]) != 1 { // no ADDR record: no failures yet
				b.Fatalf("batch: %v %d", err, len(out.Responses[table]))
			}
			if g, err := db.GetItem(ctx, get); err != nil || g.Item == nil {
				b.Fatalf("get: %v", err)
			}
		}
	})
	b.Run("handler", func(b *testing.B) {
		for b.Loop() {
			if r := e.Do(http.MethodGet, path, apitest.BobToken, nil); r.Status != 200 {
				b.Fatalf("%d %s", r.Status, r.Body)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		srv := httptest.NewServer(e.Handler)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+apitest.BobToken)
		for b.Loop() {
			res, err := srv.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatalf("%d", res.StatusCode)
			}
		}
	})
}
