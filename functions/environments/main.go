// Command environments is the Lambda for the environments group: lease, read, list, delete, touch,
// tunnel tickets and logs.
package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/nodes/apigw"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	// A lease wakes a node of its pool through the node protocol's
	// WebSocket API, where the stack has one.
	var opts []environments.Option
	// A delete tells the node of an environment it runs the same way.
	if rt.Config.SocketEndpoint != "" {
		poster := apigw.New(rt.AWS, rt.Config.SocketEndpoint)
		opts = append(opts, environments.WithOfferer(nodes.NewOfferer(st, poster, clock.System{}, rt.Log, 0)),
			environments.WithStopper(nodes.NewStopper(st, poster, clock.System{}, rt.Log, 0)))
	}
	// An ended environment's kept log is answered with a signed link.
	if rt.Config.Bucket != "" {
		blobs := blob.FromConfig(rt.AWS, rt.Config.Bucket, rt.Config.LinkSignerSecretARN, clock.System{})
		opts = append(opts, environments.WithLinks(artifacts.NewService(st, blobs, clock.System{}, artifacts.Options{})))
	}
	// Preview links are served under the deployment's preview domain
	// (docs/previews.md); without one only loopback nodes serve them.
	opts = append(opts, environments.WithPreviews(environments.PreviewOptions{Domain: os.Getenv("PREVIEW_DOMAIN")}))
	lambda.Start(httpadapter.NewV2(handler(st, clock.System{}, rt.Log, opts...)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
func handler(st *store.Store, clk clock.Clock, log *slog.Logger, opts ...environments.Option) http.Handler {
	svc := environments.NewService(st, clk, opts...)
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, environments.Routes(svc))
}
