package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
)

// SocketStage is the node protocol's WebSocket stage name; nodes connect to
// wss://{api}.execute-api.{region}.amazonaws.com/nodes.
const SocketStage = "nodes"

// Node protocol throttling: every message of every node is one request of
// this stage, apart from the HTTP API's people. A node sends about one
// message every heartbeat interval (10 s) plus its claims and reports:
// about 1,800 messages a second for 5,000 nodes (docs/scale.md).
const (
	socketRate  = 3000
	socketBurst = 5000
)

// socketAccessLogFormat is the WebSocket stage's access log line.
var socketAccessLogFormat = jsonLine([][2]string{
	{"requestId", "$context.requestId"},
	{"connectionId", "$context.connectionId"},
	{"ip", "$context.identity.sourceIp"},
	{"requestTime", "$context.requestTime"},
	{"routeKey", "$context.routeKey"},
	{"eventType", "$context.eventType"},
	{"status", "$context.status"},
	{"integrationLatency", "$context.integrationLatency"},
	{"error", "$context.error.message"},
})

// newNodeSocket is the node protocol's WebSocket API: $connect authorized
// by the socket function (the node credential becomes the connection's
// principal, handed to every later message), $connect, $disconnect and
// $default integrated with it, and $default answering with the function's
// return (a request's answer needs no Management API call). Functions that
// post to connections get the stage's management endpoint and the right to
// post; functions that name it to nodes get its URL.
func (s *EnvleaseStack) newNodeSocket(groups []Group) awsapigatewayv2.WebSocketApi {
	stack := s.Stack
	var socketFn string
	for _, g := range groups {
		if g.Socket {
			socketFn = g.Name
		}
	}
	fn := s.Functions[socketFn]
	integration := func(id string) awsapigatewayv2integrations.WebSocketLambdaIntegration {
		return awsapigatewayv2integrations.NewWebSocketLambdaIntegration(jsii.String(id), fn, nil)
	}
	authorizer := awsapigatewayv2authorizers.NewWebSocketLambdaAuthorizer(jsii.String("NodeSocketAuthorizer"), fn,
		&awsapigatewayv2authorizers.WebSocketLambdaAuthorizerProps{
			IdentitySource: jsii.Strings("route.request.header.Authorization"),
		})
	api := awsapigatewayv2.NewWebSocketApi(stack, jsii.String("NodeSocket"), &awsapigatewayv2.WebSocketApiProps{
		ApiName:     jsii.String(*stack.StackName() + "-nodes"),
		Description: jsii.String("envlease node protocol (WebSocket)"),
		ConnectRouteOptions: &awsapigatewayv2.WebSocketRouteOptions{
			Integration: integration("NodeSocketConnect"), Authorizer: authorizer,
		},
		DisconnectRouteOptions: &awsapigatewayv2.WebSocketRouteOptions{Integration: integration("NodeSocketDisconnect")},
		DefaultRouteOptions: &awsapigatewayv2.WebSocketRouteOptions{
			Integration: integration("NodeSocketDefault"), ReturnResponse: jsii.Bool(true),
		},
	})
	stage := awsapigatewayv2.NewWebSocketStage(stack, jsii.String("NodeSocketStage"), &awsapigatewayv2.WebSocketStageProps{
		WebSocketApi: api,
		StageName:    jsii.String(SocketStage),
		AutoDeploy:   jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit: jsii.Number(socketRate), BurstLimit: jsii.Number(socketBurst),
		},
	})
	logs := awslogs.NewLogGroup(stack, jsii.String("NodeSocketAccessLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH,
	})
	cfnStage := stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
	cfnStage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: logs.LogGroupArn(),
		Format:         jsii.String(socketAccessLogFormat),
	})
	// $disconnect and $default belong to the connection $connect
	// authorized: API Gateway accepts no authorizer on them.
	for _, child := range *api.Node().Children() {
		if res, ok := child.Node().DefaultChild().(awscdk.CfnResource); ok && *res.CfnResourceType() == "AWS::ApiGatewayV2::Route" {
			suppress(child, nagRule{"AwsSolutions-APIG4",
				"Only $connect takes an authorizer in a WebSocket API; it checks the node credential, and every later message of the connection carries the principal it returned.", nil})
		}
	}

	for _, g := range groups {
		f := s.Functions[g.Name]
		if g.PostsToNodes {
			f.AddEnvironment(jsii.String("NODE_SOCKET_ENDPOINT"), stage.CallbackUrl(), nil)
			api.GrantManageConnections(f)
			suppressTree(f.Role(), nagRule{"AwsSolutions-IAM5",
				"A node protocol connection's id is made by API Gateway when a node connects; posting and closing are allowed on this API's connections only.",
				nil})
		}
		if g.NamesSocket {
			f.AddEnvironment(jsii.String("NODE_SOCKET_URL"), stage.Url(), nil)
		}
	}
	awscdk.NewCfnOutput(stack, jsii.String("NodeSocketUrl"), &awscdk.CfnOutputProps{
		Value:       stage.Url(),
		Description: jsii.String("the node protocol's WebSocket URL (agent -socket-url; registration names it)"),
	})
	return api
}
