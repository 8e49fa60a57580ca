package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/infra/bundle"
	"github.com/envlease/envlease/shared/store"
)

// specEndpoints are the 13 endpoints of the API spec (section 4) and the
// routes the service adds, each with a concrete request and the group whose
// function must receive it.
var specEndpoints = []struct {
	Method, Path, Group string
}{
	{"POST", "/v1/tokens", "tokens"},                         // 1
	{"POST", "/v1/keys", "keys"},                             // 2
	{"POST", "/v1/sandboxes", "sandboxes"},                   // 3
	{"POST", "/v1/environments", "environments"},             // 4
	{"GET", "/v1/environments/env_1", "environments"},        // 5
	{"GET", "/v1/environments", "environments"},              // 6
	{"DELETE", "/v1/environments/env_1", "environments"},     // 7
	{"POST", "/v1/environments/env_1/touch", "environments"}, // 8
	{"GET", "/v1/templates", "templates"},                    // 9
	{"GET", "/v1/artifacts", "artifacts"},                    // 10
	{"POST", "/v1/artifacts/art_1/links", "artifacts"},       // 11
	{"GET", "/v1/quotas", "quotas"},                          // 12
	{"GET", "/v1/usage", "usage"},                            // 13
	// Added by the service.
	{"GET", "/v1/keys", "keys"},
	{"DELETE", "/v1/keys/key_1", "keys"},
	{"GET", "/v1/whoami", "keys"},
	{"POST", "/v1/console/codes", "tokens"},
	{"POST", "/v1/console/sessions", "tokens"},
	{"POST", "/v1/tokens/exchange", "tokens"},
	{"GET", "/v1/issuers", "tokens"},
	{"DELETE", "/v1/issuers/iss_1", "tokens"},
	{"GET", "/v1/sandboxes/sbx_1", "sandboxes"},
	{"POST", "/v1/artifacts", "artifacts"},
	{"POST", "/v1/artifacts/art_1/complete", "artifacts"},
	{"POST", "/v1/environments/env_1/tunnel", "environments"},
	{"POST", "/v1/nodes/node_1/claim", "nodes"},
	{"GET", "/v1/nodes", "nodes"},
	{"GET", "/v1/openapi.json", "docs"},
	{"GET", "/v1/openapi.yaml", "docs"},
	{"GET", "/", "console"},
	{"GET", "/console/app.js", "console"},
	// Paths nobody owns reach the catch-all, which answers the JSON 404.
	{"GET", "/v1/unknown", "docs"},
	{"GET", "/unknown", "docs"},
	{"GET", "/consoles", "docs"},
}

// route is one AWS::ApiGatewayV2::Route, resolved to its function.
type route struct {
	Method, Path string // "ANY", "/v1/keys/{proxy+}"; Path "$default" for the default route
	Function     string // logical id
}

func apiRoutes(t *testing.T, s *synthesized) []route {
	t.Helper()
	integrations := s.resources("AWS::ApiGatewayV2::Integration")
	var out []route
	for id, r := range s.resources("AWS::ApiGatewayV2::Route") {
		p := props(r)
		// The node protocol's WebSocket API has routes of its own
		// (websocket_test.go).
		if ref(p["ApiId"]) != logicalID(s.Stack.Api) {
			continue
		}
		integ, ok := integrations[ref(p["Target"])]
		if !ok {
			t.Fatalf("route %s: target %v is not an integration of this stack", id, p["Target"])
		}
		ip := props(integ)
		if ip["IntegrationType"] != "AWS_PROXY" || ip["PayloadFormatVersion"] != "2.0" {
			t.Errorf("route %s: integration is %v payload %v, want AWS_PROXY 2.0", id, ip["IntegrationType"], ip["PayloadFormatVersion"])
		}
		key := p["RouteKey"].(string)
		rt := route{Function: ref(ip["IntegrationUri"])}
		if key == "$default" {
			rt.Method, rt.Path = "ANY", "$default"
		} else {
			rt.Method, rt.Path, _ = strings.Cut(key, " ")
		}
		out = append(out, rt)
	}
	return out
}

// match picks the route API Gateway would: an exact path beats a greedy
// {proxy+} (longest prefix first), a method beats ANY, $default is last.
func match(routes []route, method, path string) (route, bool) {
	best, bestScore := route{}, -1
	for _, r := range routes {
		if r.Method != "ANY" && r.Method != method {
			continue
		}
		score := -1
		switch {
		case r.Path == "$default":
			score = 0
		case r.Path == path:
			score = 1_000_000
		case strings.HasSuffix(r.Path, "/{proxy+}"):
			prefix := strings.TrimSuffix(r.Path, "{proxy+}")
			if strings.HasPrefix(path, prefix) && len(path) > len(prefix) {
				score = 1000 + len(prefix)
			}
		}
		if score < 0 {
			continue
		}
		if r.Method != "ANY" {
			score++
		}
		if score > bestScore {
			best, bestScore = r, score
		}
	}
	return best, bestScore >= 0
}

func TestEveryEndpointReachesItsFunction(t *testing.T) {
	s := synth(t)
	routes := apiRoutes(t, s)
	byID := map[string]string{}
	for name, id := range s.FunctionIDs {
		byID[id] = name
	}
	for _, e := range specEndpoints {
		r, ok := match(routes, e.Method, e.Path)
		if !ok {
			t.Errorf("%s %s: no route", e.Method, e.Path)
			continue
		}
		if got := byID[r.Function]; got != e.Group {
			t.Errorf("%s %s: routed by %s %s to %q, want %q", e.Method, e.Path, r.Method, r.Path, got, e.Group)
		}
	}
	// Every declared prefix is routed, with ANY, to its own group.
	want := map[string]string{}
	for _, g := range Groups {
		for _, r := range g.Routes {
			want[r.Path] = g.Name
			if r.Proxy {
				want[r.Path+"/{proxy+}"] = g.Name
			}
		}
	}
	got := map[string]string{}
	for _, r := range routes {
		if r.Path == "$default" {
			continue
		}
		if r.Method != "ANY" {
			t.Errorf("route %s %s: want method ANY", r.Method, r.Path)
		}
		got[r.Path] = byID[r.Function]
	}
	for p, g := range want {
		if got[p] != g {
			t.Errorf("route ANY %s goes to %q, want %q", p, got[p], g)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d routes besides $default, want %d", len(got), len(want))
	}
}

func TestHTTPAPIStage(t *testing.T) {
	s := synth(t)
	stages := map[string]map[string]any{}
	for id, r := range s.resources("AWS::ApiGatewayV2::Stage") {
		if ref(props(r)["ApiId"]) == logicalID(s.Stack.Api) {
			stages[id] = r
		}
	}
	if len(stages) != 1 {
		t.Fatalf("%d stages of the HTTP API, want 1", len(stages))
	}
	for id, r := range stages {
		p := props(r)
		if p["StageName"] != "$default" || p["AutoDeploy"] != true {
			t.Errorf("stage %s: name %v autoDeploy %v", id, p["StageName"], p["AutoDeploy"])
		}
		rs, _ := p["DefaultRouteSettings"].(map[string]any)
		if rs["ThrottlingRateLimit"] == nil || rs["ThrottlingBurstLimit"] == nil {
			t.Errorf("stage %s: no throttling in %v", id, rs)
		}
		al, _ := p["AccessLogSettings"].(map[string]any)
		if _, ok := s.resources("AWS::Logs::LogGroup")[ref(al["DestinationArn"])]; !ok {
			t.Errorf("stage %s: access logs go to %v, not a log group of this stack", id, al["DestinationArn"])
		}
		format, _ := al["Format"].(string)
		var fields map[string]string
		if err := json.Unmarshal([]byte(format), &fields); err != nil {
			t.Fatalf("access log format is not JSON: %v\n%s", err, format)
		}
		for _, k := range []string{"requestId", "ip", "method", "routeKey", "status", "latency"} {
			if fields[k] == "" {
				t.Errorf("access log format lacks %q: %s", k, format)
			}
		}
		if fields["ip"] != "$context.identity.sourceIp" {
			t.Errorf("access log ip = %q, want the connection's source address", fields["ip"])
		}
	}
	for id, r := range s.resources("AWS::ApiGatewayV2::Api") {
		if props(r)["CorsConfiguration"] != nil {
			t.Errorf("api %s: CORS is on; nothing needs it", id)
		}
	}
	for _, out := range []string{"ApiUrl", "TableName", "BucketName"} {
		check(t, "output "+out, func() { s.Assertion.HasOutput(jsii.String(out), map[string]any{}) })
	}
}

func TestTableMatchesSchema(t *testing.T) {
	s := synth(t)
	tables := s.resources("AWS::DynamoDB::Table")
	if len(tables) != 1 {
		t.Fatalf("%d tables, want 1", len(tables))
	}
	sch := store.Schema
	keys := func(pk, sk string) []any {
		return []any{
			map[string]any{"AttributeName": pk, "KeyType": "HASH"},
			map[string]any{"AttributeName": sk, "KeyType": "RANGE"},
		}
	}
	var gsis, attrs []any
	attrNames := []string{sch.PartitionKey, sch.SortKey}
	for _, ix := range sch.Indexes {
		// No index projects everything: each carries only what its
		// readers filter on, so a write of other attributes skips it.
		if ix.Projection != "KEYS_ONLY" && ix.Projection != "INCLUDE" {
			t.Errorf("index %s projects %q", ix.Name, ix.Projection)
		}
		proj := map[string]any{"ProjectionType": string(ix.Projection)}
		if len(ix.Include) > 0 {
			var inc []any
			for _, a := range ix.Include {
				inc = append(inc, a)
			}
			proj["NonKeyAttributes"] = inc
		}
		gsis = append(gsis, map[string]any{
			"IndexName":  ix.Name,
			"KeySchema":  keys(ix.PartitionKey, ix.SortKey),
			"Projection": proj,
		})
		attrNames = append(attrNames, ix.PartitionKey, ix.SortKey)
	}
	for _, a := range attrNames {
		attrs = append(attrs, map[string]any{"AttributeName": a, "AttributeType": "S"})
	}
	check(t, "table", func() {
		s.Assertion.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
			"DeletionPolicy":      "Retain",
			"UpdateReplacePolicy": "Retain",
			"Properties": map[string]any{
				"BillingMode":                      "PAY_PER_REQUEST",
				"KeySchema":                        keys(sch.PartitionKey, sch.SortKey),
				"AttributeDefinitions":             assertions.Match_ArrayWith(&attrs),
				"GlobalSecondaryIndexes":           gsis,
				"TimeToLiveSpecification":          map[string]any{"AttributeName": sch.TTLAttribute, "Enabled": true},
				"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			},
		})
	})
	for _, r := range tables {
		if n := len(props(r)["AttributeDefinitions"].([]any)); n != len(attrNames) {
			t.Errorf("%d attribute definitions, want %d", n, len(attrNames))
		}
	}
}

func TestBucket(t *testing.T) {
	s := synth(t)
	var artifacts map[string]any
	for id, r := range s.resources("AWS::S3::Bucket") {
		p := props(r)
		if r["DeletionPolicy"] != "Retain" {
			t.Errorf("bucket %s is not retained", id)
		}
		pab, _ := p["PublicAccessBlockConfiguration"].(map[string]any)
		for _, k := range []string{"BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"} {
			if pab[k] != true {
				t.Errorf("bucket %s: %s is %v", id, k, pab[k])
			}
		}
		if p["BucketEncryption"] == nil {
			t.Errorf("bucket %s: not encrypted", id)
		}
		if id == logicalID(s.Stack.Bucket) {
			artifacts = p
		}
	}
	if artifacts == nil {
		t.Fatal("no artifact bucket")
	}
	rules := map[string]map[string]any{}
	for _, r := range artifacts["LifecycleConfiguration"].(map[string]any)["Rules"].([]any) {
		m := r.(map[string]any)
		rules[m["Id"].(string)] = m
	}
	if r := rules["ExpireOrgObjectsBackstop"]; r == nil || r["Prefix"] != ObjectPrefix || r["ExpirationInDays"] != float64(400) {
		t.Errorf("backstop expiry rule = %v", r)
	}
	if r := rules["AbortIncompleteMultipartUploads"]; r == nil ||
		r["AbortIncompleteMultipartUpload"].(map[string]any)["DaysAfterInitiation"] != float64(1) {
		t.Errorf("multipart abort rule = %v", r)
	}
	if artifacts["LoggingConfiguration"] == nil {
		t.Error("artifact bucket has no server access logs")
	}
	// TLS only: the bucket policy denies aws:SecureTransport false.
	tls := false
	for _, r := range s.resources("AWS::S3::BucketPolicy") {
		if ref(props(r)["Bucket"]) != logicalID(s.Stack.Bucket) {
			continue
		}
		for _, st := range props(r)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			b, _ := json.Marshal(st)
			if strings.Contains(string(b), `"aws:SecureTransport":"false"`) && st.(map[string]any)["Effect"] == "Deny" {
				tls = true
			}
		}
	}
	if !tls {
		t.Error("artifact bucket policy does not deny plain HTTP")
	}
}

func TestFunctions(t *testing.T) {
	s := synth(t)
	fns := s.resources("AWS::Lambda::Function")
	if len(fns) != len(Groups) {
		t.Errorf("%d functions, want %d (one per group)", len(fns), len(Groups))
	}
	logGroups := s.resources("AWS::Logs::LogGroup")
	for _, g := range Groups {
		id := s.FunctionIDs[g.Name]
		r := fns[id]
		if r == nil {
			t.Errorf("%s: no function", g.Name)
			continue
		}
		p := props(r)
		if p["Runtime"] != "provided.al2023" || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v handler %v", g.Name, p["Runtime"], p["Handler"])
		}
		if a := strList(p["Architectures"]); len(a) != 1 || a[0] != "arm64" {
			t.Errorf("%s: architectures %v", g.Name, a)
		}
		if p["MemorySize"] != float64(g.MemoryMB) || p["Timeout"] != g.Timeout.Seconds() {
			t.Errorf("%s: memory %v timeout %v, want %d, %v", g.Name, p["MemorySize"], p["Timeout"], g.MemoryMB, g.Timeout.Seconds())
		}
		if g.Timeout.Seconds() >= 30 && !g.IsJob() {
			t.Errorf("%s: timeout %s is beyond API Gateway's integration limit", g.Name, g.Timeout)
		}
		if g.IsJob() && g.Timeout >= g.Schedule {
			t.Errorf("%s: timeout %s lets runs overlap (schedule %s)", g.Name, g.Timeout, g.Schedule)
		}
		env := p["Environment"].(map[string]any)["Variables"].(map[string]any)
		want := []string{"BUCKET_NAME", "LOG_LEVEL", "TABLE_NAME"}
		if g.SignsLinks {
			want = append(want, "LINK_SIGNER_SECRET_ARN")
		}
		if g.S3Origin {
			want = append(want, "S3_ORIGIN")
		}
		if g.PostsToNodes {
			want = append(want, "NODE_SOCKET_ENDPOINT")
		}
		if g.NamesSocket {
			want = append(want, "NODE_SOCKET_URL")
		}
		if g.SignsIdentity {
			want = append(want, "IDENTITY_KMS_KEY", "ISSUER_URL")
		}
		if g.SecretsKey != SecretsNone {
			want = append(want, "SECRETS_KEY_ARN")
		}
		var got []string
		for k := range env {
			got = append(got, k)
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: environment %v, want %v", g.Name, got, want)
		}
		if ref(env["TABLE_NAME"]) != logicalID(s.Stack.Table) || ref(env["BUCKET_NAME"]) != logicalID(s.Stack.Bucket) {
			t.Errorf("%s: TABLE_NAME/BUCKET_NAME do not name the stack's table and bucket: %v", g.Name, env)
		}
		if g.SignsLinks && ref(env["LINK_SIGNER_SECRET_ARN"]) != logicalID(s.Stack.LinkSecret) {
			t.Errorf("%s: LINK_SIGNER_SECRET_ARN = %v", g.Name, env["LINK_SIGNER_SECRET_ARN"])
		}
		if g.S3Origin {
			// The console's policy names the bucket's endpoint, the host
			// presigned URLs point at.
			b, _ := json.Marshal(env["S3_ORIGIN"])
			if !strings.Contains(string(b), "https://") || !strings.Contains(string(b), logicalID(s.Stack.Bucket)) || !strings.Contains(string(b), "RegionalDomainName") {
				t.Errorf("%s: S3_ORIGIN = %s, want https:// and the bucket's regional domain name", g.Name, b)
			}
		}
		lc, _ := p["LoggingConfig"].(map[string]any)
		lg := logGroups[ref(lc["LogGroup"])]
		if lg == nil || props(lg)["RetentionInDays"] != float64(30) {
			t.Errorf("%s: log group %v without one-month retention", g.Name, lc["LogGroup"])
		}
	}
}

// TestSAMAssetMetadata: sam local finds each function's code through
// aws:asset:path, relative to the template's folder.
func TestSAMAssetMetadata(t *testing.T) {
	s := synth(t)
	for _, g := range Groups {
		r := s.resources("AWS::Lambda::Function")[s.FunctionIDs[g.Name]]
		md, _ := r["Metadata"].(map[string]any)
		path, _ := md["aws:asset:path"].(string)
		if path == "" || md["aws:asset:property"] != "Code" {
			t.Errorf("%s: metadata %v lacks aws:asset:path / aws:asset:property=Code", g.Name, md)
			continue
		}
		if filepath.IsAbs(path) {
			t.Errorf("%s: aws:asset:path %q is absolute; SAM wants it relative to cdk.out", g.Name, path)
		}
		if fi, err := os.Stat(filepath.Join(s.Outdir, path, "bootstrap")); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: %s/bootstrap is not an executable in the assembly (%v)", g.Name, path, err)
		}
	}
}

func TestSchedules(t *testing.T) {
	s := synth(t)
	rules := s.resources("AWS::Events::Rule")
	dlq := logicalID(s.Stack.DLQ)
	want := map[string]string{"timeouts": "rate(1 minute)", "lostnodes": "rate(1 minute)", "expiry": "rate(15 minutes)", "nodesws": "rate(1 minute)", "deliveries": "rate(1 minute)"}
	seen := map[string]bool{}
	for id, r := range rules {
		p := props(r)
		targets := p["Targets"].([]any)
		if len(targets) != 1 {
			t.Errorf("rule %s: %d targets", id, len(targets))
			continue
		}
		tg := targets[0].(map[string]any)
		var group string
		for name, fid := range s.FunctionIDs {
			if ref(tg["Arn"]) == fid {
				group = name
			}
		}
		seen[group] = true
		if p["ScheduleExpression"] != want[group] {
			t.Errorf("rule %s for %q: schedule %v, want %q", id, group, p["ScheduleExpression"], want[group])
		}
		if dl, _ := tg["DeadLetterConfig"].(map[string]any); ref(dl["Arn"]) != dlq {
			t.Errorf("rule %s: dead-letter config %v, want the jobs DLQ", id, tg["DeadLetterConfig"])
		}
		if rp, _ := tg["RetryPolicy"].(map[string]any); rp["MaximumRetryAttempts"] == nil {
			t.Errorf("rule %s: no retry attempts set", id)
		}
	}
	for g := range want {
		if !seen[g] {
			t.Errorf("no schedule for %s", g)
		}
	}
	for id, r := range s.resources("AWS::SQS::Queue") {
		if props(r)["SqsManagedSseEnabled"] != true && props(r)["KmsMasterKeyId"] == nil {
			t.Errorf("queue %s is not encrypted", id)
		}
	}
}

func TestAlarms(t *testing.T) {
	s := synth(t)
	type key struct{ fn, metric string }
	have := map[key]bool{}
	dlqAlarm := false
	for id, r := range s.resources("AWS::CloudWatch::Alarm") {
		p := props(r)
		if len(strList(p["AlarmActions"])) == 0 {
			t.Errorf("alarm %s notifies nobody", id)
		}
		for _, d := range asSlice(p["Dimensions"]) {
			dm := d.(map[string]any)
			switch dm["Name"] {
			case "FunctionName":
				have[key{ref(dm["Value"]), p["MetricName"].(string)}] = true
			case "QueueName":
				if p["MetricName"] == "ApproximateNumberOfMessagesVisible" {
					dlqAlarm = true
				}
			}
		}
	}
	for _, g := range Groups {
		for _, m := range []string{"Errors", "Throttles"} {
			if !have[key{s.FunctionIDs[g.Name], m}] {
				t.Errorf("%s: no %s alarm", g.Name, m)
			}
		}
	}
	if !dlqAlarm {
		t.Error("no alarm on the DLQ's visible messages")
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

var dataAction = regexp.MustCompile(`^(dynamodb|s3|secretsmanager):`)

// policyStatements returns every IAM statement in the template with the
// logical ids of the roles and users it applies to.
func policyStatements(s *synthesized) (out []struct {
	Principals []string
	Statement  map[string]any
}) {
	add := func(principals []string, doc any) {
		d, _ := doc.(map[string]any)
		for _, st := range asSlice(d["Statement"]) {
			out = append(out, struct {
				Principals []string
				Statement  map[string]any
			}{principals, st.(map[string]any)})
		}
	}
	for _, r := range s.resources("AWS::IAM::Policy") {
		p := props(r)
		var principals []string
		for _, x := range append(asSlice(p["Roles"]), asSlice(p["Users"])...) {
			principals = append(principals, ref(x))
		}
		add(principals, p["PolicyDocument"])
	}
	for _, typ := range []string{"AWS::IAM::Role", "AWS::IAM::User"} {
		for id, r := range s.resources(typ) {
			for _, pol := range asSlice(props(r)["Policies"]) {
				add([]string{id}, pol.(map[string]any)["PolicyDocument"])
			}
		}
	}
	return out
}

func TestNoDataActionOnStar(t *testing.T) {
	s := synth(t)
	for _, ps := range policyStatements(s) {
		st := ps.Statement
		if st["Effect"] != "Allow" {
			continue
		}
		var data []string
		for _, a := range strList(st["Action"]) {
			if dataAction.MatchString(a) || a == "*" {
				data = append(data, a)
			}
			if strings.Contains(a, "*") {
				t.Errorf("%v: wildcard action %q", ps.Principals, a)
			}
		}
		// ListStreams, alone in its statement, may be on "*": it has no
		// resource-level permission and lists stream ARNs, never an item
		// (access.go; only a WakeOnOutbox group has it, TestLeastPrivilege).
		if len(data) == 0 || strings.Join(data, " ") == strings.Join(streamListActions, " ") {
			continue
		}
		for _, res := range strList(st["Resource"]) {
			if res == "*" {
				t.Errorf("%v: %v on resource *", ps.Principals, data)
			}
		}
	}
}

// TestLeastPrivilege: each function's role holds exactly the data actions
// its group is granted in groups.go, and only signers read the secret.
func TestLeastPrivilege(t *testing.T) {
	s := synth(t)
	roleOf := map[string]string{}
	for id, r := range s.resources("AWS::Lambda::Function") {
		roleOf[ref(props(r)["Role"])] = id
	}
	groupOf := map[string]string{}
	for name, id := range s.FunctionIDs {
		groupOf[id] = name
	}
	got := map[string]map[string]bool{}
	signerUser := ""
	for id := range s.resources("AWS::IAM::User") {
		signerUser = id
	}
	for _, ps := range policyStatements(s) {
		for _, p := range ps.Principals {
			name := groupOf[roleOf[p]]
			if p == signerUser {
				name = "(link signer)"
			}
			if name == "" {
				continue
			}
			if got[name] == nil {
				got[name] = map[string]bool{}
			}
			for _, a := range strList(ps.Statement["Action"]) {
				if dataAction.MatchString(a) {
					got[name][a] = true
				}
			}
		}
	}
	expect := func(actions ...[]string) string {
		all := concat(actions...)
		sort.Strings(all)
		return strings.Join(all, " ")
	}
	keys := func(m map[string]bool) string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	for _, g := range Groups {
		want := [][]string{g.Table.actions(), g.Bucket.objectActions()}
		if g.Bucket != BucketNone {
			want = append(want, bucketListActions, g.Bucket.bucketActions())
		}
		if g.SignsLinks {
			want = append(want, secretReadActions)
		}
		if g.WakeOnOutbox {
			want = append(want, streamReadActions, streamListActions)
		}
		if w, h := expect(want...), keys(got[g.Name]); w != h {
			t.Errorf("%s: data actions\n  got  %s\n  want %s", g.Name, h, w)
		}
		if g.Table.ReadOnly {
			for a := range got[g.Name] {
				if a == "dynamodb:PutItem" || a == "dynamodb:DeleteItem" || a == "dynamodb:BatchWriteItem" {
					t.Errorf("%s is read-only but may %s", g.Name, a)
				}
			}
		}
	}
	if w, h := expect(linkSignerActions), keys(got["(link signer)"]); w != h {
		t.Errorf("link signer: got %s, want %s", h, w)
	}
}

// TestNagClean: cdk-nag's AwsSolutions pack ran over the stack, found nothing
// unsuppressed, and every suppression gives a reason.
func TestNagClean(t *testing.T) {
	s := synth(t)
	for _, m := range s.Messages {
		if m.Level == "ERROR" || m.Level == "WARNING" {
			t.Errorf("%s %s: %s", m.Level, m.Path, m.Text)
		}
	}
	// The report proves the pack ran (and lists every rule it applied).
	f, err := os.Open(filepath.Join(s.Outdir, "AwsSolutions-"+StackName+"-NagReport.csv"))
	if err != nil {
		t.Fatalf("no cdk-nag report: %v", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 10 {
		t.Fatalf("cdk-nag report has only %d rows", len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	suppressed := 0
	for _, r := range rows[1:] {
		switch r[col["Compliance"]] {
		case "Non-Compliant":
			t.Errorf("cdk-nag: %s on %s: %s", r[col["Rule ID"]], r[col["Resource ID"]], r[col["Rule Info"]])
		case "Suppressed":
			suppressed++
			if len(strings.TrimSpace(r[col["Exception Reason"]])) < 20 {
				t.Errorf("cdk-nag: suppression of %s on %s has no real reason: %q", r[col["Rule ID"]], r[col["Resource ID"]], r[col["Exception Reason"]])
			}
		}
	}
	t.Logf("cdk-nag: %d report rows, %d suppressed findings", len(rows)-1, suppressed)
	// Every suppression recorded in the template says why.
	for id, r := range s.Template["Resources"].(map[string]any) {
		md, _ := r.(map[string]any)["Metadata"].(map[string]any)
		nag, _ := md["cdk_nag"].(map[string]any)
		for _, sup := range asSlice(nag["rules_to_suppress"]) {
			if reason, _ := sup.(map[string]any)["reason"].(string); len(reason) < 20 {
				t.Errorf("%s: suppression %v has no real reason", id, sup)
			}
		}
	}
}

// corsOrigins is the artifact bucket's CORS rule: the browser may PUT and GET
// presigned URLs only from the console's origins.
func corsOrigins(t *testing.T, template map[string]any, bucketID string) []any {
	t.Helper()
	r, ok := template["Resources"].(map[string]any)[bucketID].(map[string]any)
	if !ok {
		t.Fatalf("no resource %s", bucketID)
	}
	cors, _ := props(r)["CorsConfiguration"].(map[string]any)
	rules, _ := cors["CorsRules"].([]any)
	if len(rules) != 1 {
		t.Fatalf("artifact bucket CORS rules = %v, want one", cors)
	}
	rule := rules[0].(map[string]any)
	methods := strList(rule["AllowedMethods"])
	sort.Strings(methods)
	if strings.Join(methods, ",") != "GET,HEAD,PUT" {
		t.Errorf("CORS methods %v, want GET, HEAD, PUT", methods)
	}
	if strings.Join(strList(rule["ExposedHeaders"]), ",") != "ETag" {
		t.Errorf("CORS exposed headers %v, want ETag (multipart uploads read it)", rule["ExposedHeaders"])
	}
	return asSlice(rule["AllowedOrigins"])
}

// The API's own endpoint is the console's origin: the rule names it and
// never allows any origin.
func TestBucketCORS(t *testing.T) {
	s := synth(t)
	origins := corsOrigins(t, s.Template, logicalID(s.Stack.Bucket))
	if len(origins) != 1 {
		t.Fatalf("CORS origins %v, want only the API's endpoint", origins)
	}
	b, _ := json.Marshal(origins[0])
	want := `{"Fn::GetAtt":["` + logicalID(s.Stack.Api) + `","ApiEndpoint"]}`
	if string(b) != want {
		t.Errorf("CORS origin %s, want the API's endpoint %s", b, want)
	}
}

// Custom domains given to the stack are allowed as well, and anything that
// is not an https origin is refused at synth time.
func TestBucketCORSConsoleOrigins(t *testing.T) {
	dirs := fakeAssetDirs(t)
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	app := func(origins any) (*EnvleaseStack, error) {
		_, stack, err := newApp(appOptions{Root: root, Outdir: t.TempDir(), Groups: Groups, AssetDirs: dirs,
			Context: map[string]interface{}{ctxConsoleOrigins: origins}})
		return stack, err
	}
	for _, bad := range []string{"*", "http://console.example.com", "https://console.example.com/", "https://console.example.com/x", "console.example.com"} {
		if _, err := app(bad); err == nil {
			t.Errorf("console origin %q accepted", bad)
		}
	}
	// As cdk.json would give them (a list) and as -c would (comma separated).
	for _, origins := range []any{
		[]interface{}{"https://console.example.com", "https://envlease.example.org:8443"},
		"https://console.example.com, https://envlease.example.org:8443",
	} {
		stack, err := app(origins)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := assertions.Template_FromStack(stack.Stack, nil).ToJSON()
		got := corsOrigins(t, *tmpl, logicalID(stack.Bucket))
		if len(got) != 3 || got[1] != "https://console.example.com" || got[2] != "https://envlease.example.org:8443" {
			t.Errorf("context %v: CORS origins %v, want the API's endpoint and the two custom origins", origins, got)
		}
		if _, ok := got[0].(map[string]any); !ok {
			t.Errorf("first CORS origin %v, want the API's endpoint", got[0])
		}
	}
}

// fakeAssetDirs gives each group a folder holding a stand-in bootstrap.
func fakeAssetDirs(t *testing.T) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, g := range Groups {
		d := filepath.Join(t.TempDir(), g.Name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "bootstrap"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		dirs[g.Name] = d
	}
	return dirs
}

// A preview domain given to the stack reaches the functions that make
// preview links, and only them; one that is not a host name is refused at
// synth time.
func TestPreviewDomain(t *testing.T) {
	dirs := fakeAssetDirs(t)
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	app := func(domain string) (*EnvleaseStack, error) {
		_, stack, err := newApp(appOptions{Root: root, Outdir: t.TempDir(), Groups: Groups, AssetDirs: dirs,
			Context: map[string]interface{}{ctxPreviewDomain: domain}})
		return stack, err
	}
	for _, bad := range []string{"https://preview.example.com", "preview.example.com:443", "preview.example.com/x", "Preview.Example.com", "localhost", "a b.example.com"} {
		if _, err := app(bad); err == nil {
			t.Errorf("preview domain %q accepted", bad)
		}
	}
	stack, err := app("{node}.preview.example.com")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *assertions.Template_FromStack(stack.Stack, nil).ToJSON()
	resources := tmpl["Resources"].(map[string]any)
	for _, g := range Groups {
		fn := resources[logicalID(stack.Functions[g.Name])].(map[string]any)
		vars := fn["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
		got, ok := vars["PREVIEW_DOMAIN"]
		if g.MakesPreviews != ok || (ok && got != "{node}.preview.example.com") {
			t.Errorf("%s: PREVIEW_DOMAIN %v (set: %v), want it set only where previews are made", g.Name, got, ok)
		}
	}
}
