// Command docs is the Lambda for the API description (GET /v1/openapi.json and
// GET /v1/openapi.yaml) and the HTTP API's $default route: a path no group
// owns reaches it and gets the service's JSON 404.
package main

import (
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/openapi"
	"github.com/envlease/envlease/shared/platform"
)

func main() {
	// The document is embedded and public: this function reads no table and
	// builds no AWS client, so it needs only the log level.
	log := platform.Logger(os.Stdout, os.Getenv("LOG_LEVEL"))
	lambda.Start(httpadapter.NewV2(handler(log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
// Its routes are all public, so it has no authenticator.
func handler(log *slog.Logger) http.Handler {
	return httpapi.New(httpapi.Config{Logger: log}, openapi.Routes())
}
