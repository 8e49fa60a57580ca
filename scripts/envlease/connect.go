package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/client"
)

// localStartWait bounds how long a command waits for a local server that
// refuses connections (ENVLEASE_SERVER_WAIT changes it; 0 does not wait): the dev server builds its S3 server on its first run,
// which takes a minute or two, and a quick start pasted as one block runs
// its first command at once.
const localStartWait = 3 * time.Minute

// localRetryEvery is how often a refused local server is tried again.
const localRetryEvery = 250 * time.Millisecond

// newClient is the API client every command uses: the CLI's user agent, and
// a transport that waits for a local server still starting.
func (a *app) newClient(baseURL, token string) (*client.Client, error) {
	wait := localStartWait
	if v := a.getenv("ENVLEASE_SERVER_WAIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, usagef("ENVLEASE_SERVER_WAIT=%q: want a duration such as 0s or 3m", v)
		}
		wait = d
	}
	return client.New(baseURL, token, client.WithUserAgent(userAgent()),
		client.WithHTTPClient(&http.Client{Transport: &startingServerTransport{next: http.DefaultTransport, say: a.say, wait: wait}}))
}

// startingServerTransport sends a request again while a server on this
// machine refuses the connection, for up to wait, saying once that it
// waits. A refused connection carried nothing, so sending again is safe
// for any method. Remote servers are not waited for: a refusal there is
// an error to report at once.
type startingServerTransport struct {
	next http.RoundTripper
	say  func(format string, args ...any)
	wait time.Duration

	once sync.Once
}

func (t *startingServerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err == nil || !refused(err) || !isLocal(req.URL.Hostname()) {
		return res, err
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return res, err
	}
	deadline := time.Now().Add(t.wait)
	for time.Now().Before(deadline) {
		t.once.Do(func() {
			t.say("Waiting for the server at %s to start (on a first run 'go run ./scripts/devserver' builds for a minute or two; Ctrl-C to stop)…", origin(req.URL))
		})
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(localRetryEvery):
		}
		again := req.Clone(req.Context())
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			again.Body = body
		}
		res, err = t.next.RoundTrip(again)
		if err == nil || !refused(err) {
			return res, err
		}
	}
	return res, err
}

// refused reports whether err is a refused TCP connection.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// isLocal reports whether host is this machine: localhost or a loopback
// address.
func isLocal(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// origin is scheme://host of u.
func origin(u *url.URL) string { return u.Scheme + "://" + u.Host }

// withScheme completes an API URL given without one, as people type
// addresses: http:// for this machine (the dev server speaks plain HTTP),
// https:// for any other host. The second result says what was done, for
// the user to see; it is empty when s had a scheme.
func withScheme(name, s string) (string, string) {
	s = strings.TrimSpace(s)
	if s == "" || strings.Contains(s, "://") {
		return s, ""
	}
	host := s
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	scheme := "https://"
	if isLocal(strings.Trim(host, "[]")) {
		scheme = "http://"
	}
	return scheme + s, fmt.Sprintf("%s %s has no scheme: using %s%s", name, s, scheme, s)
}
