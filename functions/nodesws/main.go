// Command nodesws is the Lambda behind the node protocol's WebSocket API:
// the $connect authorizer (the node credential, whose principal API Gateway
// then hands every message of the connection), $connect, $disconnect and
// $default (every message: shared/nodes Socket.Handle, answered as the
// route's response), and, on its EventBridge schedule, the re-offer job
// and the stop job for as long as the invocation may run. Wiring only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/nodes/apigw"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

// ReofferEvery is how often a scheduled invocation runs the re-offer job;
// reofferMargin is the time it leaves before the function's deadline.
const (
	ReofferEvery  = 2 * time.Second
	reofferMargin = 5 * time.Second
)

func main() {
	rt := platform.Boot(context.Background())
	cfg, log, awsCfg := rt.Config, rt.Log, rt.AWS
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	var links nodes.Linker
	if cfg.Bucket != "" {
		blobs := blob.FromConfig(awsCfg, cfg.Bucket, cfg.LinkSignerSecretARN, clock.System{})
		links = artifacts.NewService(st, blobs, clock.System{}, artifacts.Options{})
	}
	var conns connections = noConnections{}
	if cfg.SocketEndpoint != "" {
		conns = apigw.New(awsCfg, cfg.SocketEndpoint)
	}
	lambda.Start(newFunction(st, links, conns, clock.System{}, log, cfg.SocketURL).handle)
}

// connections posts to and closes the WebSocket API's connections.
type connections interface {
	nodes.Poster
	nodes.Closer
}

// noConnections is the connections of a function without NODE_SOCKET_ENDPOINT.
type noConnections struct{}

func (noConnections) Post(context.Context, nodes.ConnectionID, []byte) error {
	return fmt.Errorf("NODE_SOCKET_ENDPOINT is not set: no offer can be posted")
}

func (noConnections) CloseConnection(context.Context, nodes.ConnectionID, string) error {
	return fmt.Errorf("NODE_SOCKET_ENDPOINT is not set: no connection can be closed")
}

type function struct {
	auth    httpapi.Authenticator
	socket  *nodes.Socket
	offerer *nodes.Offerer
	stopper *nodes.Stopper
	conns   connections
	log     *slog.Logger
}

func newFunction(st *store.Store, links nodes.Linker, conns connections, clk clock.Clock, log *slog.Logger, socketURL string) *function {
	stopper := nodes.NewStopper(st, conns, clk, log, 0)
	// A pause a node's report completes is pushed to it at once.
	svc := nodes.NewService(st, links, clk, nodes.Options{SocketURL: socketURL, Teller: stopper})
	return &function{
		auth: auth.New(st, clk, log), socket: nodes.NewSocket(svc, st, log),
		offerer: nodes.NewOfferer(st, conns, clk, log, 0), stopper: stopper,
		conns: conns, log: log,
	}
}

// event is enough of every event this function gets to tell them apart.
type event struct {
	Type           string `json:"type"`
	MethodArn      string `json:"methodArn"`
	Source         string `json:"source"`
	RequestContext struct {
		RouteKey     string `json:"routeKey"`
		ConnectionID string `json:"connectionId"`
	} `json:"requestContext"`
}

func (f *function) handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	switch {
	case ev.Type == "REQUEST" && ev.MethodArn != "":
		var req events.APIGatewayCustomAuthorizerRequestTypeRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, err
		}
		return f.authorize(ctx, req)
	case ev.RequestContext.ConnectionID != "":
		var req events.APIGatewayWebsocketProxyRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, err
		}
		return f.route(ctx, req), nil
	case ev.Source == "aws.events":
		f.reoffer(ctx)
		return map[string]string{"status": "done"}, nil
	}
	return nil, fmt.Errorf("unexpected event")
}

// authorize is the $connect authorizer: a node credential, checked as the
// HTTP API checks it, becomes the connection's principal.
func (f *function) authorize(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	header := ""
	for k, v := range req.Headers {
		if strings.EqualFold(k, "Authorization") {
			header = v
		}
	}
	p, err := f.auth.Authenticate(ctx, header, req.RequestContext.Identity.SourceIP)
	if err == nil && p.Credential != domain.CredentialNode {
		err = domain.Errorf(domain.CodeForbidden, "the node protocol takes a node credential")
	}
	if err != nil {
		status := httpapi.Status(domain.ErrorCode(err))
		f.log.InfoContext(ctx, "request", "method", "WS", "path", "$connect", "status", status, "route", "WS $connect", "err", err.Error())
		if status == http.StatusUnauthorized {
			// API Gateway answers 401 for exactly this error.
			return events.APIGatewayCustomAuthorizerResponse{}, fmt.Errorf("Unauthorized")
		}
		return policy("denied", "Deny", req.MethodArn, nil), nil
	}
	return policy(p.OrgID+"/"+p.KeyID, "Allow", req.MethodArn, principalContext(p)), nil
}

func policy(principal, effect, arn string, c map[string]any) events.APIGatewayCustomAuthorizerResponse {
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: principal,
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{Version: "2012-10-17", Statement: []events.IAMPolicyStatement{
			{Action: []string{"execute-api:Invoke"}, Effect: effect, Resource: []string{arn}},
		}},
		Context: c,
	}
}

// principalContext and principalFrom carry the principal through API
// Gateway's authorizer context, which it gives every message of the
// connection: a message costs no authentication read.
func principalContext(p domain.Principal) map[string]any {
	return map[string]any{"org": p.OrgID, "pool": p.Pool, "keyId": p.KeyID, "keyHash": p.KeyHash, "credential": p.Credential, "role": string(p.Role)}
}

func principalFrom(a any) domain.Principal {
	m, _ := a.(map[string]any)
	s := func(k string) string { v, _ := m[k].(string); return v }
	return domain.Principal{OrgID: s("org"), Pool: s("pool"), KeyID: s("keyId"), KeyHash: s("keyHash"), Credential: s("credential"), Role: domain.Role(s("role"))}
}

func (f *function) route(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) events.APIGatewayProxyResponse {
	c := nodes.Conn{ID: nodes.ConnectionID(req.RequestContext.ConnectionID), Principal: principalFrom(req.RequestContext.Authorizer)}
	switch req.RequestContext.RouteKey {
	case "$connect":
		// The authorizer checked the credential; the connection is
		// recorded by the node's hello, which names the node.
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}
	case "$disconnect":
		if err := f.socket.Disconnect(ctx, c); err != nil {
			return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}
	}
	out, end := f.socket.Answer(ctx, c, []byte(req.Body))
	if end {
		// The connection's credential is revoked: the answer is posted (a
		// route response would go out after the connection is deleted, so
		// never), then the connection is deleted.
		if len(out) > 0 {
			if err := f.conns.Post(ctx, c.ID, out); err != nil && !errors.Is(err, nodes.ErrGone) {
				f.log.WarnContext(ctx, "answer to a revoked credential not posted", "connection", string(c.ID), "err", err.Error())
			}
		}
		if err := f.conns.CloseConnection(ctx, c.ID, nodes.ReasonRevoked); err != nil {
			f.log.WarnContext(ctx, "connection of a revoked credential not closed", "connection", string(c.ID), "err", err.Error())
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}
	}
	return events.APIGatewayProxyResponse{StatusCode: http.StatusOK, Body: string(out)}
}

// reoffer runs the re-offer job and the stop job until the invocation's
// deadline is near: the schedule starts one a minute, so one runs nearly
// all the time, and a lost offer or stop waits a few seconds, not a minute.
func (f *function) reoffer(ctx context.Context) {
	until, ok := ctx.Deadline()
	if !ok {
		until = time.Now().Add(time.Minute)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.stopper.ResendLoop(ctx, ReofferEvery, until.Add(-reofferMargin))
	}()
	f.offerer.ReofferLoop(ctx, ReofferEvery, until.Add(-reofferMargin))
	<-done
}
