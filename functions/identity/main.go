// Command identity is the Lambda of envlease's OIDC issuer for its
// environments (docs/identity.md): the discovery document and key set
// (/.well-known/...), the claims an environment's tokens carry
// (GET /v1/environments/{id}/identity) and the tokens a node fetches for an
// environment it runs (POST /v1/nodes/{id}/environments/{env}/identity). It
// is the one function that may sign with the issuer's KMS key.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/identity"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	cfg, err := kmsConfig()
	if err != nil {
		platform.Fatal(rt.Log, "configuration", err)
	}
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	keys := identity.NewKMSKeys(kms.NewFromConfig(rt.AWS), cfg)
	lambda.Start(httpadapter.NewV2(handler(st, os.Getenv("ISSUER_URL"), keys, clock.System{}, rt.Log)).ProxyWithContext)
}

// kmsConfig reads which KMS keys sign and are published
// (docs/identity.md, "Keys and rotation"). The function signs only with
// KMS: without IDENTITY_KMS_KEY it does not start.
func kmsConfig() (identity.KMSConfig, error) {
	cfg := identity.KMSConfig{Current: os.Getenv("IDENTITY_KMS_KEY"), Next: os.Getenv("IDENTITY_KMS_NEXT_KEY")}
	if cfg.Current == "" {
		return cfg, fmt.Errorf("IDENTITY_KMS_KEY is not set")
	}
	if os.Getenv("ISSUER_URL") == "" {
		return cfg, fmt.Errorf("ISSUER_URL is not set")
	}
	retired, err := identity.ParseRetired(os.Getenv("IDENTITY_KMS_RETIRED_KEYS"))
	if err != nil {
		return cfg, err
	}
	cfg.Retired = retired
	return cfg, nil
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, issuerURL string, keys identity.KeySource, clk clock.Clock, log *slog.Logger) http.Handler {
	svc := identity.NewService(identity.NewIssuer(issuerURL, keys, clk),
		nodes.NewService(st, nil, clk, nodes.Options{}), environments.NewService(st, clk)).WithLogger(log)
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, identity.Routes(svc))
}
