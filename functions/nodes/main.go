// Command nodes is the Lambda for /v1/nodes: node credentials, registration,
// and the HTTP fallback of the node protocol (functions/nodesws): heartbeats,
// long-poll claims (up to 20 s; the function's timeout leaves room) and
// state reports. Claims of snapshot leases carry a signed link, so
// it signs like the artifacts function.
package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/secrets"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	cfg, log, awsCfg := rt.Config, rt.Log, rt.AWS
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	// Without a bucket no snapshot link can be signed; a claim of a snapshot
	// lease then fails that environment with a clear error.
	var links nodes.Linker
	if cfg.Bucket != "" {
		blobs := blob.FromConfig(awsCfg, cfg.Bucket, cfg.LinkSignerSecretARN, clock.System{})
		links = artifacts.NewService(st, blobs, clock.System{}, artifacts.Options{})
	}
	// Nodes fetch their environments' secrets here: this function opens
	// data keys (kms:Decrypt), and makes none.
	var keys secrets.DataKeys
	if cfg.SecretsKeyARN != "" {
		keys = secrets.KMSKeys{Client: kms.NewFromConfig(awsCfg), KeyID: cfg.SecretsKeyARN}
	}
	lambda.Start(httpadapter.NewV2(handler(st, links, keys, clock.System{}, log, cfg.SocketURL)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
// Registrations name socketURL, the node protocol's WebSocket.
func handler(st *store.Store, links nodes.Linker, keys secrets.DataKeys, clk clock.Clock, log *slog.Logger, socketURL string) http.Handler {
	svc := nodes.NewService(st, links, clk, nodes.Options{SocketURL: socketURL, Secrets: secrets.NewService(st, keys, clk, log)})
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, nodes.Routes(svc))
}
