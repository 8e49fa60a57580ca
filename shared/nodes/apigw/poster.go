// Package apigw posts node protocol messages to nodes' WebSocket
// connections, and closes them, through API Gateway's Management API: the
// AWS side of nodes.Poster and nodes.Closer (the local stack's is
// nodes.LocalSockets).
package apigw

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"

	"github.com/envlease/envlease/shared/metrics"
	"github.com/envlease/envlease/shared/nodes"
)

// Poster posts to connections of one WebSocket API stage.
type Poster struct {
	client *apigatewaymanagementapi.Client
}

// New returns a Poster for the stage's management endpoint,
// https://{api-id}.execute-api.{region}.amazonaws.com/{stage}
// (NODE_SOCKET_ENDPOINT).
func New(cfg aws.Config, endpoint string) *Poster {
	return &Poster{client: apigatewaymanagementapi.NewFromConfig(cfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.APIOptions = append(o.APIOptions, metrics.CountCalls(metrics.Socket))
	})}
}

// Post sends msg to the connection; nodes.ErrGone when API Gateway no
// longer has it.
func (p *Poster) Post(ctx context.Context, conn nodes.ConnectionID, msg []byte) error {
	_, err := p.client.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{
		ConnectionId: aws.String(string(conn)), Data: msg,
	})
	var gone *types.GoneException
	if errors.As(err, &gone) {
		return nodes.ErrGone
	}
	if err != nil {
		return fmt.Errorf("post to connection: %w", err)
	}
	return nil
}

// CloseConnection ends the connection (DeleteConnection; API Gateway then
// runs $disconnect). reason is not sent: the Management API carries none.
// A connection API Gateway no longer has is already closed.
func (p *Poster) CloseConnection(ctx context.Context, conn nodes.ConnectionID, _ string) error {
	_, err := p.client.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(string(conn))})
	var gone *types.GoneException
	if errors.As(err, &gone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete connection: %w", err)
	}
	return nil
}

var (
	_ nodes.Poster = (*Poster)(nil)
	_ nodes.Closer = (*Poster)(nil)
)
