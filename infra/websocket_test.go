package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"
)

// refsIn returns every logical id v refers to, however deeply (a Fn::Join
// of an ARN names several).
func refsIn(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		if id := ref(x); id != "" && !strings.HasPrefix(id, "AWS::") {
			out = append(out, id)
		}
		for _, y := range x {
			out = append(out, refsIn(y)...)
		}
	case []any:
		for _, y := range x {
			out = append(out, refsIn(y)...)
		}
	}
	return out
}

func socketGroup(t *testing.T) Group {
	t.Helper()
	for _, g := range Groups {
		if g.Socket {
			return g
		}
	}
	t.Fatal("no group serves the node protocol")
	return Group{}
}

// The node protocol's WebSocket API: $connect authorized by the socket
// function with the Authorization header, $disconnect and $default
// integrated with it, $default answering with the function's return.
func TestNodeSocketRoutes(t *testing.T) {
	s := synth(t)
	fnID := s.FunctionIDs[socketGroup(t).Name]
	apiID := logicalID(s.Stack.NodeSocket)
	api := s.resources("AWS::ApiGatewayV2::Api")[apiID]
	if p := props(api); p["ProtocolType"] != "WEBSOCKET" || p["RouteSelectionExpression"] == nil {
		t.Fatalf("node socket api: %v", p)
	}
	integrations := s.resources("AWS::ApiGatewayV2::Integration")
	authorizers := s.resources("AWS::ApiGatewayV2::Authorizer")
	seen := map[string]bool{}
	for id, r := range s.resources("AWS::ApiGatewayV2::Route") {
		p := props(r)
		if ref(p["ApiId"]) != apiID {
			continue
		}
		key, _ := p["RouteKey"].(string)
		seen[key] = true
		ip := props(integrations[ref(p["Target"])])
		if ip["IntegrationType"] != "AWS_PROXY" || !slices.Contains(refsIn(ip["IntegrationUri"]), fnID) {
			t.Errorf("route %s (%s): integration %v does not proxy to the socket function %s", id, key, ip, fnID)
		}
		switch key {
		case "$connect":
			ap := props(authorizers[ref(p["AuthorizerId"])])
			if p["AuthorizationType"] != "CUSTOM" || ap["AuthorizerType"] != "REQUEST" ||
				!slices.Contains(strList(ap["IdentitySource"]), "route.request.header.Authorization") ||
				!slices.Contains(refsIn(ap["AuthorizerUri"]), fnID) {
				t.Errorf("$connect: authorization %v, authorizer %v", p["AuthorizationType"], ap)
			}
		case "$default":
			if p["RouteResponseSelectionExpression"] != "$default" {
				t.Errorf("$default does not send the function's answer back: %v", p)
			}
		case "$disconnect":
		default:
			t.Errorf("unexpected route %q", key)
		}
	}
	for _, k := range []string{"$connect", "$disconnect", "$default"} {
		if !seen[k] {
			t.Errorf("no %s route", k)
		}
	}
	// API Gateway may invoke the function for the routes and the authorizer.
	invokes := 0
	for _, r := range s.resources("AWS::Lambda::Permission") {
		p := props(r)
		if ref(p["FunctionName"]) == fnID && p["Principal"] == "apigateway.amazonaws.com" && slices.Contains(refsIn(p["SourceArn"]), apiID) {
			invokes++
		}
	}
	if invokes < 2 {
		t.Errorf("%d permissions let the node socket invoke %s, want the routes' and the authorizer's", invokes, fnID)
	}
}

// The stage is throttled apart from the HTTP API and logs every message;
// the functions that post to nodes may post to this API's connections and
// know its management endpoint; the ones that name it to nodes know its URL.
func TestNodeSocketStageAndAccess(t *testing.T) {
	s := synth(t)
	apiID := logicalID(s.Stack.NodeSocket)
	stages := 0
	for id, r := range s.resources("AWS::ApiGatewayV2::Stage") {
		p := props(r)
		if ref(p["ApiId"]) != apiID {
			continue
		}
		stages++
		rs, _ := p["DefaultRouteSettings"].(map[string]any)
		if p["StageName"] != SocketStage || p["AutoDeploy"] != true || rs["ThrottlingRateLimit"] != float64(socketRate) || rs["ThrottlingBurstLimit"] != float64(socketBurst) {
			t.Errorf("stage %s: %v", id, p)
		}
		al, _ := p["AccessLogSettings"].(map[string]any)
		var fields map[string]string
		if _, ok := s.resources("AWS::Logs::LogGroup")[ref(al["DestinationArn"])]; !ok || json.Unmarshal([]byte(al["Format"].(string)), &fields) != nil || fields["connectionId"] == "" || fields["routeKey"] == "" {
			t.Errorf("stage %s: access logs %v", id, al)
		}
	}
	if stages != 1 {
		t.Fatalf("%d stages of the node socket, want 1", stages)
	}

	roleOf := map[string]string{}
	for name, id := range s.FunctionIDs {
		roleOf[ref(props(s.resources("AWS::Lambda::Function")[id])["Role"])] = name
	}
	posts := map[string]bool{}
	for id, r := range s.resources("AWS::IAM::Policy") {
		p := props(r)
		b, _ := json.Marshal(p["PolicyDocument"])
		if !strings.Contains(string(b), "execute-api:ManageConnections") {
			continue
		}
		if !slices.Contains(refsIn(p["PolicyDocument"]), apiID) || !strings.Contains(string(b), "/@connections/") {
			t.Errorf("policy %s allows posting beyond the node socket's connections: %s", id, b)
		}
		for _, role := range p["Roles"].([]any) {
			posts[roleOf[ref(role)]] = true
		}
	}
	for _, g := range Groups {
		if posts[g.Name] != g.PostsToNodes {
			t.Errorf("%s: may post to nodes %v, want %v", g.Name, posts[g.Name], g.PostsToNodes)
		}
		env := props(s.resources("AWS::Lambda::Function")[s.FunctionIDs[g.Name]])["Environment"].(map[string]any)["Variables"].(map[string]any)
		if g.PostsToNodes && !slices.Contains(refsIn(env["NODE_SOCKET_ENDPOINT"]), apiID) {
			t.Errorf("%s: NODE_SOCKET_ENDPOINT = %v, want the node socket's stage", g.Name, env["NODE_SOCKET_ENDPOINT"])
		}
		if g.NamesSocket {
			b, _ := json.Marshal(env["NODE_SOCKET_URL"])
			if !strings.Contains(string(b), "wss://") || !slices.Contains(refsIn(env["NODE_SOCKET_URL"]), apiID) {
				t.Errorf("%s: NODE_SOCKET_URL = %s", g.Name, b)
			}
		}
	}
	check(t, "output NodeSocketUrl", func() { s.Assertion.HasOutput(jsii.String("NodeSocketUrl"), map[string]any{}) })
}
