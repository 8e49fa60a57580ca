// Command nodes is the Lambda for /v1/nodes: node credentials, registration,
// heartbeats, long-poll claims (up to 20 s; the function's timeout leaves
// room) and state reports. Claims of snapshot leases carry a signed link, so
// it signs like the artifacts function.
package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	ctx := context.Background()
	cfg, err := platform.LoadConfig()
	log := platform.Logger(os.Stdout, cfg.LogLevel)
	if err != nil {
		platform.Fatal(log, "configuration", err)
	}
	awsCfg, err := platform.AWSConfig(ctx)
	if err != nil {
		platform.Fatal(log, "aws", err)
	}
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	// Without a bucket no snapshot link can be signed; a claim of a snapshot
	// lease then fails that environment with a clear error.
	var links nodes.Linker
	if cfg.Bucket != "" {
		signer := blob.SignerConfig{SecretARN: cfg.LinkSignerSecretARN}
		if signer.SecretARN != "" {
			signer.Fetch = blob.SecretsManagerFetch(secretsmanager.NewFromConfig(awsCfg))
		}
		blobs := blob.New(blob.Options{
			Client: s3.NewFromConfig(awsCfg), Bucket: cfg.Bucket, Clock: clock.System{},
			LinkCredentials: signer.LinkCredentials(),
		})
		links = artifacts.NewService(st, blobs, clock.System{}, artifacts.Options{})
	}
	lambda.Start(httpadapter.NewV2(handler(st, links, clock.System{}, log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, links nodes.Linker, clk clock.Clock, log *slog.Logger) http.Handler {
	svc := nodes.NewService(st, links, clk, nodes.Options{})
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, nodes.Routes(svc))
}
