package apitest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

// CheckedHandler wraps a handler served over real HTTP (httptest.NewServer,
// the devserver) so every answer it gives, to the test's own client or to
// anything else calling it (a node agent), is checked against the API
// description, as Env.Do checks the answers it records. Each response is
// buffered, checked, then written out unchanged. A mismatch fails t with
// Errorf, which is safe from the server's goroutines.
func CheckedHandler(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		res := rec.Result()
		body := rec.Body.Bytes()
		if v, err := check.Default(); err != nil {
			t.Errorf("API description: %v", err)
		} else if err := v.Response(r, res.StatusCode, res.Header, body); err != nil {
			t.Errorf("%v", err)
		}
		for k, vs := range res.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
	})
}

// Event reads a sample payload from the repository's events/ folder (tests of
// functions/<name> run two levels below it) into v.
func Event(t testing.TB, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("events/%s: %v", file, err)
	}
}
