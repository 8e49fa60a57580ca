// Package apitest runs handlers through the real HTTP stack against a local
// DynamoDB (minidyn) loaded with a test organization configuration, with a
// fake clock. It is imported only by tests.
package apitest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

//go:embed fixture.json
var fixtureJSON []byte

// Tokens of the test configuration (fixture.json).
const (
	AliceToken = "els_dev_alice_0123456789abcdef0123456789abcdef" // acme admin
	BobToken   = "els_dev_bob_0123456789abcdef0123456789abcdef01" // acme member
	CarolToken = "els_dev_carol_0123456789abcdef0123456789abcdef" // globex admin
)

// Start is the time the fake clock starts at.
var Start = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// Env is a running test stack.
type Env struct {
	T      testing.TB
	Dynamo *devstack.Dynamo
	Store  *store.Store
	Clock  *clock.Fake
	Log    *slog.Logger
	Auth   *auth.Authenticator
	// Handler serves the routes given to New.
	Handler http.Handler
	// RemoteAddr is the peer address requests come from (default 192.0.2.1:1234).
	RemoteAddr string
	// NotAPI is set by tests whose handler serves routes of their own that
	// are not part of the API (fixtures of the HTTP stack): the response
	// checks, which hold responses to the API description, skip them.
	NotAPI bool
}

// Fixture returns the parsed test configuration.
func Fixture(t testing.TB) fixture.File {
	f, err := fixture.Parse(fixtureJSON)
	if err != nil {
		t.Fatalf("test fixture: %v", err)
	}
	return f
}

// New starts minidyn, applies the test configuration with its tokens, and
// builds a handler from the route groups that routes returns.
func New(t testing.TB, routes func(e *Env) [][]httpapi.Route) *Env {
	t.Helper()
	d := devstack.NewTestDynamo(t)
	e := &Env{
		T:          t,
		Dynamo:     d,
		Store:      store.New(d.Client(context.Background()), d.Table),
		Clock:      clock.NewFake(Start),
		Log:        slog.New(slog.NewJSONHandler(io.Discard, nil)),
		RemoteAddr: "192.0.2.1:1234",
	}
	if testing.Verbose() {
		e.Log = slog.New(slog.NewJSONHandler(testWriter{t}, nil))
	}
	e.Store.SetClock(e.Clock)
	e.Auth = auth.New(e.Store, e.Clock, e.Log)
	if err := fixture.Apply(context.Background(), e.Store, Fixture(t), fixture.Options{WithTokens: true, Now: Start}); err != nil {
		t.Fatalf("apply fixture: %v", err)
	}
	if routes != nil {
		e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: e.Auth}, routes(e)...)
	}
	return e
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(p)))
	return len(p), nil
}

// Response is a recorded response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test if it is not JSON.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response %d is not JSON: %v: %s", r.Status, err, r.Body)
	}
}

// Map decodes the body as a JSON object.
func (r *Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Code returns the error code of an error body, or "".
func (r *Response) Code() string {
	var b struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Code
}

// Do sends a request through the handler. body may be nil, a string or []byte
// (sent as is), or any value (sent as JSON). token "" sends no Authorization.
func (e *Env) Do(method, path, token string, body any) *Response {
	e.T.Helper()
	return e.DoWith(method, path, token, body, nil)
}

// DoWith is Do with extra headers.
func (e *Env) DoWith(method, path, token string, body any, header http.Header) *Response {
	e.T.Helper()
	var rdr io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rdr = bytes.NewBufferString(b)
	case []byte:
		rdr = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.T.Fatalf("encode body: %v", err)
		}
		rdr = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rdr)
	req.RemoteAddr = e.RemoteAddr
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rdr != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	e.Handler.ServeHTTP(rec, req)
	res := rec.Result()
	body2, _ := io.ReadAll(res.Body)
	out := &Response{Status: res.StatusCode, Header: res.Header, Body: body2}
	if !e.NotAPI {
		for _, check := range responseChecks {
			check(e.T, req, out)
		}
	}
	return out
}

// responseChecks run on every response; the API description's validator
// registers itself here so no test can return an undescribed response.
var responseChecks []func(t testing.TB, req *http.Request, res *Response)

// AddResponseCheck registers a check run on every response of every Env.
func AddResponseCheck(f func(t testing.TB, req *http.Request, res *Response)) {
	responseChecks = append(responseChecks, f)
}

// NewClockNow returns a fake clock at the real current time, for tests whose
// records are also judged by real time.
func NewClockNow() *clock.Fake { return clock.NewFake(time.Now()) }

// DiscardLogger returns a logger that writes nothing.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// NewAuth returns an authenticator over e's store and clock.
func NewAuth(e *Env) *auth.Authenticator { return auth.New(e.Store, e.Clock, e.Log) }
