// Command secrets is the Lambda for /v1/secrets: admins set and delete
// organization secrets, members list their names. Setting one makes a data
// key with KMS (kms:GenerateDataKey, this function's only KMS right); it
// never opens one (docs/secrets.md).
package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/secrets"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	keys := secrets.KMSKeys{Client: kms.NewFromConfig(rt.AWS), KeyID: rt.Config.SecretsKeyARN}
	lambda.Start(httpadapter.NewV2(handler(st, keys, clock.System{}, rt.Log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, keys secrets.DataKeys, clk clock.Clock, log *slog.Logger) http.Handler {
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, secrets.Routes(secrets.NewService(st, keys, clk, log)))
}
