// Command usage is the Lambda for GET /v1/usage: seconds of environment time
// per template per UTC day.
package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/usage"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	lambda.Start(httpadapter.NewV2(handler(st, clock.System{}, rt.Log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, clk clock.Clock, log *slog.Logger) http.Handler {
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, usage.Routes(usage.NewService(st, clk)), budgets.Routes(budgets.NewService(st, clk)))
}
