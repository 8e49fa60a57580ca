package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
)

// The sample payload goes through the Lambda's adapter: the page comes back
// compressed (binary, so base64 through API Gateway) with its security
// headers, and the S3 origin the function was given is in its policy.
func TestLambdaConsole(t *testing.T) {
	const s3 = "https://envlease-artifacts.s3.eu-west-1.amazonaws.com"
	proxy := httpadapter.NewV2(handler(apitest.DiscardLogger(), s3)).ProxyWithContext
	raw, err := os.ReadFile("../../events/console-index.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	res, err := proxy(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, res.Body)
	}
	csp := res.Headers["Content-Security-Policy"]
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self' " + s3} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if res.Headers["X-Content-Type-Options"] != "nosniff" || res.Headers["Referrer-Policy"] != "no-referrer" {
		t.Errorf("headers %v", res.Headers)
	}
	if res.Headers["Content-Encoding"] != "gzip" || !res.IsBase64Encoded {
		t.Fatalf("Content-Encoding %q, base64 %v: want the gzip body, base64-encoded", res.Headers["Content-Encoding"], res.IsBase64Encoded)
	}
	gz, err := base64.StdEncoding.DecodeString(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `<script type="module" src="/console/app.js">`) {
		t.Errorf("page: %.300s", page)
	}
}
