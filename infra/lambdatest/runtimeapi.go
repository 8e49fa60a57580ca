// Package lambdatest runs the built bootstrap binaries the way Lambda runs
// them: each as a process configured only by environment variables (the ones
// the synthesized template gives the function, plus those Lambda itself sets),
// fetching its invocations from a Lambda Runtime API that this package serves
// on loopback. It also records, per function, every AWS action the process
// calls, by sitting between it and the local DynamoDB, S3, Secrets Manager and
// API Gateway Management API. It is imported only by tests.
package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The paths and headers of the Lambda Runtime API (version 2018-06-01), as
// AWS documents it for custom runtimes.
const (
	runtimePrefix = "/2018-06-01/runtime"

	HeaderRequestID   = "Lambda-Runtime-Aws-Request-Id"
	HeaderDeadline    = "Lambda-Runtime-Deadline-Ms"
	HeaderFunctionARN = "Lambda-Runtime-Invoked-Function-Arn"
	HeaderTraceID     = "Lambda-Runtime-Trace-Id"
	headerErrorType   = "Lambda-Runtime-Function-Error-Type"

	// maxResponse is Lambda's synchronous response payload limit.
	maxResponse = 6 << 20
)

// FunctionError is what a runtime reported through .../error or
// /init/error: the body Lambda would hand the caller.
type FunctionError struct {
	Type    string   `json:"errorType"`
	Message string   `json:"errorMessage"`
	Stack   []string `json:"stackTrace,omitempty"`
	// Init is true for an error reported before the first invocation.
	Init bool `json:"-"`
}

func (e *FunctionError) Error() string {
	if e.Init {
		return fmt.Sprintf("init error %s: %s", e.Type, e.Message)
	}
	return fmt.Sprintf("function error %s: %s", e.Type, e.Message)
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	arn      string
	trace    string
	done     chan result // buffered 1
}

type result struct {
	body []byte
	err  error
}

// RuntimeAPI is one execution environment's Runtime API: it hands out one
// invocation at a time, as Lambda does, to the one runtime process that polls it.
type RuntimeAPI struct {
	// Addr is host:port, the value of AWS_LAMBDA_RUNTIME_API.
	Addr string

	srv     *http.Server
	pending chan *invocation
	polled  chan struct{} // closed at the first GET .../next
	pollOne sync.Once
	initErr chan *FunctionError // buffered 1

	mu       sync.Mutex
	inflight map[string]*invocation
}

// NewRuntimeAPI serves a Runtime API on a free loopback port until Close.
func NewRuntimeAPI() (*RuntimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &RuntimeAPI{
		Addr:     ln.Addr().String(),
		pending:  make(chan *invocation),
		polled:   make(chan struct{}),
		initErr:  make(chan *FunctionError, 1),
		inflight: map[string]*invocation{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+runtimePrefix+"/invocation/next", r.next)
	mux.HandleFunc("POST "+runtimePrefix+"/invocation/{id}/response", r.response)
	mux.HandleFunc("POST "+runtimePrefix+"/invocation/{id}/error", r.invocationError)
	mux.HandleFunc("POST "+runtimePrefix+"/init/error", r.initError)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// Close stops serving; a runtime still polling gets its connection closed.
func (r *RuntimeAPI) Close() { r.srv.Close() }

// Polled is closed once the runtime has asked for its first invocation:
// its init phase is over.
func (r *RuntimeAPI) Polled() <-chan struct{} { return r.polled }

// InitError delivers the error a runtime reported on /init/error.
func (r *RuntimeAPI) InitError() <-chan *FunctionError { return r.initErr }

// Invoke hands payload to the runtime's next poll and waits for its answer.
// deadline is what the runtime is told (the function's timeout from now);
// ctx bounds how long the caller waits, which on a busy machine may be longer.
func (r *RuntimeAPI) Invoke(ctx context.Context, id, arn string, payload []byte, deadline time.Time) ([]byte, error) {
	inv := &invocation{
		id: id, payload: payload, deadline: deadline, arn: arn,
		trace: traceHeader(id),
		done:  make(chan result, 1),
	}
	select {
	case r.pending <- inv:
	case <-ctx.Done():
		return nil, fmt.Errorf("no runtime asked for the invocation: %w", ctx.Err())
	}
	select {
	case res := <-inv.done:
		return res.body, res.err
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer to invocation %s: %w", id, ctx.Err())
	}
}

// traceHeader is an X-Ray trace header in Lambda's format
// (Root=1-<8 hex: epoch seconds>-<24 hex>), not sampled.
func traceHeader(requestID string) string {
	hex := strings.ReplaceAll(requestID, "-", "")
	return fmt.Sprintf("Root=1-%08x-%s;Parent=%s;Sampled=0", time.Now().Unix(), hex[:min(24, len(hex))], hex[len(hex)-min(16, len(hex)):])
}

func (r *RuntimeAPI) next(w http.ResponseWriter, req *http.Request) {
	r.pollOne.Do(func() { close(r.polled) })
	select {
	case inv := <-r.pending:
		r.mu.Lock()
		r.inflight[inv.id] = inv
		r.mu.Unlock()
		h := w.Header()
		h.Set(HeaderRequestID, inv.id)
		h.Set(HeaderDeadline, strconv.FormatInt(inv.deadline.UnixMilli(), 10))
		h.Set(HeaderFunctionARN, inv.arn)
		h.Set(HeaderTraceID, inv.trace)
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(inv.payload)
	case <-req.Context().Done():
	}
}

// take removes the in-flight invocation a runtime answers; an unknown or
// already answered id is the runtime's mistake, refused as Lambda does.
func (r *RuntimeAPI) take(w http.ResponseWriter, req *http.Request) *invocation {
	id := req.PathValue("id")
	r.mu.Lock()
	inv := r.inflight[id]
	delete(r.inflight, id)
	r.mu.Unlock()
	if inv == nil {
		writeStatus(w, http.StatusBadRequest, "InvalidRequestID", "no invocation "+id+" is in flight")
	}
	return inv
}

func (r *RuntimeAPI) response(w http.ResponseWriter, req *http.Request) {
	inv := r.take(w, req)
	if inv == nil {
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxResponse+1))
	switch {
	case err != nil:
		inv.done <- result{err: fmt.Errorf("read response: %w", err)}
	case len(body) > maxResponse:
		writeStatus(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "response over 6 MB")
		inv.done <- result{err: errors.New("response over Lambda's 6 MB limit")}
		return
	default:
		inv.done <- result{body: body}
	}
	writeStatus(w, http.StatusAccepted, "", "")
}

func (r *RuntimeAPI) invocationError(w http.ResponseWriter, req *http.Request) {
	inv := r.take(w, req)
	if inv == nil {
		return
	}
	fe := readError(req)
	inv.done <- result{err: fe}
	writeStatus(w, http.StatusAccepted, "", "")
}

func (r *RuntimeAPI) initError(w http.ResponseWriter, req *http.Request) {
	fe := readError(req)
	fe.Init = true
	select {
	case r.initErr <- fe:
	default:
	}
	writeStatus(w, http.StatusAccepted, "", "")
}

func readError(req *http.Request) *FunctionError {
	fe := &FunctionError{}
	body, _ := io.ReadAll(io.LimitReader(req.Body, maxResponse))
	if err := json.Unmarshal(body, fe); err != nil || fe.Type == "" && fe.Message == "" {
		fe.Message = string(body)
	}
	if fe.Type == "" {
		fe.Type = req.Header.Get(headerErrorType)
	}
	return fe
}

func writeStatus(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if code == http.StatusAccepted {
		w.Write([]byte(`{"status":"OK"}`))
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"errorType": typ, "errorMessage": msg})
}
