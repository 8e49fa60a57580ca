// Command console is the Lambda for the web console: its page at / and its
// files under /console/, embedded in the binary. It reads no table and builds
// no AWS client; S3_ORIGIN (the artifact bucket's endpoint) is the one place
// besides the API the page may connect to.
package main

import (
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/console"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/platform"
)

func main() {
	log := platform.Logger(os.Stdout, os.Getenv("LOG_LEVEL"))
	lambda.Start(httpadapter.NewV2(handler(log, os.Getenv("S3_ORIGIN"))).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
// Its routes are all static files, so it has no authenticator.
func handler(log *slog.Logger, s3Origin string) http.Handler {
	return httpapi.New(httpapi.Config{Logger: log}, console.Routes(console.Options{S3Origin: s3Origin}))
}
