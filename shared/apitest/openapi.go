package apitest

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/envlease/envlease/shared/openapi/check"
)

// Every response of every Env is checked against the API description, so a
// handler test cannot pass with a response the document does not describe.
func init() {
	AddResponseCheck(func(t testing.TB, req *http.Request, res *Response) {
		t.Helper()
		CheckResponse(t, req, res.Status, res.Header, res.Body)
	})
}

// CheckResponse fails t unless the response to req matches the API description.
func CheckResponse(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	v, err := check.Default()
	if err != nil {
		t.Fatalf("API description: %v", err)
	}
	if err := v.Response(req, status, header, body); err != nil {
		t.Errorf("%v", err)
	}
}

// CheckLambda checks what the API Gateway adapter returned for ev against the
// API description, for the Lambda event tests.
func CheckLambda(t testing.TB, ev events.APIGatewayV2HTTPRequest, res events.APIGatewayV2HTTPResponse) {
	t.Helper()
	path := ev.RawPath
	if ev.RawQueryString != "" {
		path += "?" + ev.RawQueryString
	}
	req, err := http.NewRequest(ev.RequestContext.HTTP.Method, path, nil)
	if err != nil {
		t.Fatalf("event request: %v", err)
	}
	h := http.Header{}
	for k, v := range res.Headers {
		h.Set(k, v)
	}
	for k, vs := range res.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	body := []byte(res.Body)
	if res.IsBase64Encoded {
		t.Fatalf("event response is base64; decode before checking")
	}
	v, err := check.Default()
	if err != nil {
		t.Fatalf("API description: %v", err)
	}
	// A function serves one group; another group's path is its router's 404.
	if err := v.PartResponse(req, res.StatusCode, h, body); err != nil {
		t.Errorf("%v", err)
	}
}

// Proxy is the Lambda entry of an HTTP function (httpadapter's ProxyWithContext).
type Proxy = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// CheckedProxy wraps a Lambda entry so every answer it gives is checked with
// CheckLambda.
func CheckedProxy(t testing.TB, p Proxy) Proxy {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		t.Helper()
		res, err := p(ctx, ev)
		if err == nil {
			CheckLambda(t, ev, res)
		}
		return res, err
	}
}
