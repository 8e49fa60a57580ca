package auth_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

// writeRecorder notes the operation and partition key of every write a
// DynamoDB client makes.
type writeRecorder struct {
	mu     sync.Mutex
	writes []string // "UpdateItem TOKEN#…"
}

func (w *writeRecorder) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("envleaseWriteRecorder",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				var keys []map[string]types.AttributeValue
				switch p := in.Parameters.(type) {
				case *dynamodb.UpdateItemInput:
					keys = append(keys, p.Key)
				case *dynamodb.PutItemInput:
					keys = append(keys, p.Item)
				case *dynamodb.DeleteItemInput:
					keys = append(keys, p.Key)
				case *dynamodb.BatchWriteItemInput, *dynamodb.TransactWriteItemsInput:
					keys = append(keys, map[string]types.AttributeValue{})
				}
				w.mu.Lock()
				for _, k := range keys {
					pk, _ := k[store.AttrPK].(*types.AttributeValueMemberS)
					v := "(unknown)"
					if pk != nil {
						v = pk.Value
					}
					w.writes = append(w.writes, middleware.GetOperationName(ctx)+" "+v)
				}
				w.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

// The stack lets the read-only functions write only items whose partition
// key starts with one of store.AuthWritePrefixes (infra/access.go). Whatever
// authentication does (lastUsed, failures, the block, the trim of an old
// record), its writes stay there, all of them single UpdateItems.
func TestAuthWritesOnlyAuthItems(t *testing.T) {
	e := apitest.New(t, nil)
	e.NotAPI = true
	rec := &writeRecorder{}
	e.Auth = auth.New(e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), rec.option)), e.Clock, e.Log)
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: e.Auth}, []httpapi.Route{{
		Method: http.MethodGet, Path: "/v1/ping", Access: httpapi.Member,
		Handler: func(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
			httpapi.WriteJSON(w, http.StatusOK, map[string]string{"org": p.OrgID})
			return nil
		},
	}})
	for i := 0; i < 3; i++ { // lastUsed, once a minute
		e.Do(http.MethodGet, "/v1/ping", apitest.AliceToken, nil)
		e.Clock.Advance(time.Minute)
	}
	for i := 0; i < 3*auth.FailureThreshold; i++ { // failures that age out (trimmed), then a block
		e.Do(http.MethodGet, "/v1/ping", "els_cli_notavalidtoken0123456789abcdefghijk", nil)
		e.Clock.Advance(7 * time.Second)
	}
	for i := 0; i < auth.FailureThreshold+1; i++ {
		e.Do(http.MethodGet, "/v1/ping", "", nil)
	}

	seen := map[string]bool{}
	for _, w := range rec.writes {
		op, pk, _ := strings.Cut(w, " ")
		p := authPrefix(pk)
		if op != "UpdateItem" || p == "" {
			t.Errorf("authentication wrote %s, outside %v", w, store.AuthWritePrefixes)
		}
		seen[p] = true
	}
	for _, p := range store.AuthWritePrefixes {
		if !seen[p] {
			t.Errorf("no write under %s was exercised: %v", p, rec.writes)
		}
	}
}

// authPrefix is the prefix of store.AuthWritePrefixes that pk has, or "".
func authPrefix(pk string) string {
	for _, p := range store.AuthWritePrefixes {
		if strings.HasPrefix(pk, p) {
			return p
		}
	}
	return ""
}
