// Command keys is the Lambda for /v1/keys: organization API keys, listing and
// revocation. Revoking a node credential ends its nodes and closes its node
// protocol connections through the WebSocket API's management endpoint
// (NODE_SOCKET_ENDPOINT).
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
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/nodes/apigw"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	var closer nodes.Closer
	if rt.Config.SocketEndpoint != "" {
		closer = apigw.New(rt.AWS, rt.Config.SocketEndpoint)
	}
	lambda.Start(httpadapter.NewV2(handler(st, closer, clock.System{}, rt.Log)).ProxyWithContext)
}

// handler is the whole function behind the adapter; tests feed it events.
// closer ends the connections of a revoked node credential (nil: none are
// closed, and each is cut at its next message); its nodes are ended either way.
func handler(st *store.Store, closer nodes.Closer, clk clock.Clock, log *slog.Logger) http.Handler {
	// Revoking a node credential ends its nodes (what they ran fails, so no
	// tunnel ticket names them) and closes its connections. The nodes
	// service here only ends nodes: it signs no links.
	ended := nodes.NewService(st, nil, clk, nodes.Options{})
	svc := keys.NewService(st, clk, keys.WithConnectionCloser(nodes.NewRevocations(st, closer, ended, log)))
	return httpapi.New(httpapi.Config{Logger: log, Auth: auth.New(st, clk, log)}, keys.KeyRoutes(svc))
}
