// Command tokens is the Lambda for POST /v1/tokens (CLI tokens), the
// console's sign-in codes (POST /v1/console/codes and /v1/console/sessions),
// the exchange of CI identity tokens (POST /v1/tokens/exchange) and the
// trusted issuers (/v1/issuers).
package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	lambda.Start(httpadapter.NewV2(handler(st, clock.System{}, rt.Log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, clk clock.Clock, log *slog.Logger) http.Handler {
	svc := keys.NewService(st, clk)
	// Issuers' documents are fetched only from public addresses, on every
	// connection (the webhook deliveries' guard).
	guard := webhooks.Guard{}
	fed := federation.NewService(st, clk, guard, federation.NewVerifiers(guard.Client(10*time.Second, nil), clk), log)
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, keys.TokenRoutes(svc), federation.Routes(fed))
}
