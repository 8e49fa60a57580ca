// Command artifacts is the Lambda for /v1/artifacts: create with presigned
// uploads, complete (verify and seal), list, read, and signed download links.
package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	cfg, log, awsCfg := rt.Config, rt.Log, rt.AWS
	rt.RequireBucket("artifacts are stored there")
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	// Links are signed with the signer secret's long-term key when one is
	// configured: the function's session credentials expire before a
	// 7-day link would. The secret is read on the first link, then cached.
	blobs := blob.FromConfig(awsCfg, cfg.Bucket, cfg.LinkSignerSecretARN, clock.System{})
	lambda.Start(httpadapter.NewV2(handler(st, blobs, clock.System{}, log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, blobs *blob.Store, clk clock.Clock, log *slog.Logger) http.Handler {
	svc := artifacts.NewService(st, blobs, clk, artifacts.Options{})
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, artifacts.Routes(svc))
}
