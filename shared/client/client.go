package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// RequestIDHeader is the response header the API puts its request id in (the
// id its logs carry), quoted in errors so a failure can be traced.
const RequestIDHeader = "X-Request-Id"

// Defaults of the retry policy.
const (
	// DefaultMaxAttempts is how many times a retryable request is sent in
	// all: the first time and up to three retries.
	DefaultMaxAttempts = 4
	// DefaultMaxRetryWait bounds one wait. A server asking for longer is not
	// waited for: the error is returned, since a command that sleeps for
	// minutes without a word is worse than one that fails and says why.
	DefaultMaxRetryWait = 30 * time.Second
)

// SleepFunc waits for d or until ctx ends, whichever is first.
type SleepFunc func(ctx context.Context, d time.Duration) error

// Client calls one envlease API with one bearer token. It is safe for
// concurrent use.
type Client struct {
	base         *url.URL
	token        string
	http         *http.Client
	sleep        SleepFunc
	maxAttempts  int
	maxRetryWait time.Duration
	userAgent    string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the http.Client for API calls and transfers (default:
// a client with no overall timeout, since transfers of large artifacts take
// long; bound calls with the context).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithSleep replaces the wait between retries (tests make it instant).
func WithSleep(s SleepFunc) Option { return func(c *Client) { c.sleep = s } }

// WithMaxAttempts sets how many times a retryable request is sent in all
// (1 turns retries off).
func WithMaxAttempts(n int) Option { return func(c *Client) { c.maxAttempts = max(n, 1) } }

// WithMaxRetryWait sets the longest wait before a retry.
func WithMaxRetryWait(d time.Duration) Option { return func(c *Client) { c.maxRetryWait = d } }

// WithUserAgent sets the User-Agent of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client of the API at baseURL (for example
// http://127.0.0.1:8080, or a deployed HTTP API's URL with its stage path)
// that authenticates with token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := ParseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{
		base: u, token: token, http: &http.Client{}, sleep: sleepContext,
		maxAttempts: DefaultMaxAttempts, maxRetryWait: DefaultMaxRetryWait, userAgent: "envlease-go",
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// ParseBaseURL checks that s is an absolute http or https URL without query
// or fragment, and drops a trailing slash.
func ParseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("API URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("API URL %q: want an http:// or https:// URL such as https://api.example.com", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("API URL %q: must not have a query or fragment", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// BaseURL returns the API's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call is one API request.
type call struct {
	method string
	// path is below the base URL, such as /v1/environments; path segments
	// from callers are escaped by the methods that build it.
	path   string
	query  url.Values
	body   any
	header http.Header
	// retry marks a request that may be sent again after a 502 or 503:
	// GET and DELETE, POSTs that store nothing (links, renewed uploads,
	// touch), and a lease carrying an Idempotency-Key. Any other POST may
	// have taken effect before the answer was lost, so it is never repeated.
	retry bool
}

// do sends a call, retrying 502 and 503 when the call allows it, and decodes
// a 2xx body into out (when not nil). It returns the final response's header.
func (c *Client) do(ctx context.Context, cl call, out any) (http.Header, error) {
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
	}
	// cl.path is already escaped (ids go through seg), so it becomes the raw
	// path as it is.
	u := *c.base
	u.RawPath = c.base.EscapedPath() + cl.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", cl.method, cl.path, err)
	}
	u.Path = p
	u.RawQuery = cl.query.Encode()
	started := time.Now()
	for attempt := 1; ; attempt++ {
		res, err := c.send(ctx, cl, u.String(), payload)
		if err != nil {
			return nil, err
		}
		if res.StatusCode >= 200 && res.StatusCode < 300 {
			defer res.Body.Close()
			if out != nil && res.StatusCode != http.StatusNoContent {
				if err := json.NewDecoder(res.Body).Decode(out); err != nil {
					return res.Header, fmt.Errorf("%s %s: decode response: %w", cl.method, cl.path, err)
				}
			}
			return res.Header, nil
		}
		apiErr := decodeError(res)
		wait, ok := c.retryWait(cl.retry, attempt, apiErr)
		if !ok {
			wait, ok = wakeWait(apiErr, started)
		}
		if !ok {
			return res.Header, apiErr
		}
		if err := c.sleep(ctx, wait); err != nil {
			return res.Header, fmt.Errorf("%w (while waiting to retry after: %v)", err, apiErr)
		}
	}
}

func (c *Client) send(ctx context.Context, cl call, target string, payload []byte) (*http.Response, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, target, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// A failure here is a *url.Error, which already names the method and
	// URL (never the token, which is a header).
	return c.http.Do(req)
}

// retryWait decides whether a failed attempt is sent again, and after how
// long: only 502 and 503, only retryable calls, at most maxAttempts in all,
// after the server's Retry-After (or a doubling backoff without one), and
// never after a wait longer than maxRetryWait.
func (c *Client) retryWait(retryable bool, attempt int, err *Error) (time.Duration, bool) {
	if !retryable || attempt >= c.maxAttempts {
		return 0, false
	}
	if err.Status != http.StatusBadGateway && err.Status != http.StatusServiceUnavailable {
		return 0, false
	}
	wait := err.RetryAfter
	if wait <= 0 {
		wait = time.Duration(1<<(attempt-1)) * time.Second
	}
	if wait > c.maxRetryWait {
		return 0, false
	}
	return wait, true
}

// MaxWake bounds how long a call waits for a paused environment it woke
// (an exec, a tunnel, a preview link): the API answers 503 waking while it
// is restored on a node, and the call is sent again after Retry-After until
// the environment is ready or MaxWake has passed. See docs/environments.md,
// "Pause on idle, wake on use".
const MaxWake = 60 * time.Second

// wakeWait says whether a call answered 503 waking is sent again, and
// after how long: any call (the wake is done once, whoever asks again),
// until MaxWake after the call began.
func wakeWait(err *Error, started time.Time) (time.Duration, bool) {
	if err.Code != "waking" { // domain.CodeWaking
		return 0, false
	}
	wait := err.RetryAfter
	if wait <= 0 {
		wait = 2 * time.Second
	}
	if time.Since(started)+wait > MaxWake {
		return 0, false
	}
	return wait, true
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date (RFC 9110
// 10.2.3); now is only used for the date form.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// Error is a failed API call: the HTTP status, the API's error body and the
// request id the service logged it under.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the API's machine-readable code (quota, not_found, …); empty
	// when the body was not the API's error shape (a proxy's answer).
	Code string
	// Message is the API's error message (or the status's text when the
	// body had none), meant for people.
	Message string
	// Field names the request field at fault, where the API says.
	Field string
	// RequestID is the id the service logged the call under (the
	// X-Request-Id header, or API Gateway's own id for its answers).
	RequestID string
	// RetryAfter is the server's Retry-After, if it sent one.
	RetryAfter time.Duration
}

// Error returns the message, the status, the code and the request id, such
// as "environment not found (404 not_found, request 9f86d081884c7d659a2feaa0)".
func (e *Error) Error() string {
	var b strings.Builder
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	b.WriteString(msg)
	b.WriteString(" (")
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.RequestID != "" {
		b.WriteString(", request " + e.RequestID)
	}
	b.WriteString(")")
	return b.String()
}

// maxErrorBody bounds how much of an error body is read: the API's are a
// line; anything longer is some other server's page.
const maxErrorBody = 64 << 10

func decodeError(res *http.Response) *Error {
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	e := &Error{
		Status:     res.StatusCode,
		RequestID:  res.Header.Get(RequestIDHeader),
		RetryAfter: parseRetryAfter(res.Header.Get("Retry-After"), time.Now()),
	}
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
		Field string `json:"field"`
		// API Gateway answers its own failures with {"message": "..."}.
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &body) == nil {
		e.Code, e.Message, e.Field = body.Code, body.Error, body.Field
		if e.Message == "" {
			e.Message = body.Message
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	if e.RequestID == "" {
		// API Gateway's own answers carry its id here instead.
		e.RequestID = res.Header.Get("Apigw-Requestid")
	}
	return e
}

// AsError returns the *Error in err's chain, if there is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// StatusOf returns the HTTP status of an API error in err's chain, or 0.
func StatusOf(err error) int {
	if e, ok := AsError(err); ok {
		return e.Status
	}
	return 0
}

// CodeOf returns the API's code of an error in err's chain, or "".
func CodeOf(err error) string {
	if e, ok := AsError(err); ok {
		return e.Code
	}
	return ""
}
