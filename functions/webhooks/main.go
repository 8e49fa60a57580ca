// Command webhooks is the Lambda for /v1/webhooks: admins manage webhooks,
// see their deliveries and retry one.
package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	// In AWS a webhook URL is always checked: public HTTPS addresses only.
	lambda.Start(httpadapter.NewV2(handler(st, clock.System{}, rt.Log, webhooks.Guard{})).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, clk clock.Clock, log *slog.Logger, g webhooks.Guard) http.Handler {
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, webhooks.Routes(webhooks.NewService(st, clk, g)))
}
