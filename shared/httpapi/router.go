// Package httpapi is the HTTP stack every endpoint group shares: routing with
// JSON 404/405, strict JSON bodies, one error-to-status table, authentication
// and request logging. A group is a list of Routes; New turns any set of
// groups into one http.Handler, so the same code serves a Lambda, SAM and
// the local dev server.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/metrics"
)

// Access says who may call a route.
type Access int

const (
	// Public routes need no token (the API description, for one).
	Public Access = iota
	// Member routes take a CLI token or an organization API key.
	Member
	// Admin routes take a CLI token of an admin.
	Admin
	// Node routes take a node credential.
	Node
	// Static routes serve files that are not part of the API (the web
	// console): no token, and the API description does not list them.
	Static
)

// HandlerFunc serves one route for an authenticated caller (the zero
// Principal on Public routes). A returned error is written by the stack.
type HandlerFunc func(w http.ResponseWriter, r *http.Request, p domain.Principal) error

// Route binds a method and a ServeMux path pattern to a handler.
type Route struct {
	Method  string
	Path    string
	Access  Access
	Handler HandlerFunc
}

// Authenticator checks a bearer header presented from a peer address.
type Authenticator interface {
	Authenticate(ctx context.Context, header, addr string) (domain.Principal, error)
}

// Config is what the stack needs besides the routes.
type Config struct {
	Logger *slog.Logger
	Auth   Authenticator
}

// New builds the handler for the given route groups.
func New(cfg Config, groups ...[]Route) http.Handler {
	mux := http.NewServeMux()
	byPath := map[string]map[string]Route{}
	var order []string
	for _, g := range groups {
		for _, rt := range g {
			if byPath[rt.Path] == nil {
				byPath[rt.Path] = map[string]Route{}
				order = append(order, rt.Path)
			}
			byPath[rt.Path][rt.Method] = rt
		}
	}
	for _, path := range order {
		methods := byPath[path]
		allow := allowHeader(methods)
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rt, ok := methods[r.Method]
			if !ok && r.Method == http.MethodHead {
				rt, ok = methods[http.MethodGet]
			}
			if !ok {
				w.Header().Set("Allow", allow)
				WriteError(w, r, logger(r.Context(), cfg.Logger), &domain.Error{
					Code: domain.CodeMethodNotAllowed, Message: "method " + r.Method + " is not allowed here; allowed: " + allow,
				})
				return
			}
			if ri, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
				ri.route = rt.Method + " " + rt.Path
			}
			serveRoute(cfg, rt, w, r)
		}))
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, logger(r.Context(), cfg.Logger), domain.Errorf(domain.CodeNotFound, "no such endpoint: %s", r.URL.Path))
	}
	mux.Handle("/", http.HandlerFunc(notFound))
	return withRequestContext(cfg.Logger, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ServeMux answers a path with "//", "." or ".." segments with an HTML
		// redirect to its clean form; to the API it is an unknown route.
		if !clean(r.URL.Path) {
			notFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// clean reports whether ServeMux would serve p as it is rather than redirect
// to path.Clean of it (which keeps a trailing slash).
func clean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np == p
}

func allowHeader(methods map[string]Route) string {
	var ms []string
	for m := range methods {
		ms = append(ms, m)
		if m == http.MethodGet {
			ms = append(ms, http.MethodHead)
		}
	}
	sort.Strings(ms)
	return strings.Join(ms, ", ")
}

func serveRoute(cfg Config, rt Route, w http.ResponseWriter, r *http.Request) {
	log := logger(r.Context(), cfg.Logger)
	var p domain.Principal
	if rt.Access != Public && rt.Access != Static {
		var err error
		p, err = cfg.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"), PeerAddr(r))
		if err != nil {
			WriteError(w, r, log, err)
			return
		}
		if err := allowed(rt.Access, p); err != nil {
			WriteError(w, r, log, err)
			return
		}
		if err := checkScope(rt, p); err != nil {
			WriteError(w, r, log, err)
			return
		}
		if ri, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
			ri.org = p.OrgID
		}
		// The store stamps this on the events the request's writes record.
		r = r.WithContext(domain.WithActor(r.Context(), domain.ActorOf(p)))
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if err := rt.Handler(w, r, p); err != nil {
		WriteError(w, r, log, err)
	}
}

func allowed(a Access, p domain.Principal) error {
	switch a {
	case Node:
		if p.Credential != domain.CredentialNode {
			return domain.Errorf(domain.CodeForbidden, "this endpoint takes a node credential")
		}
	case Member, Admin:
		if p.Credential == domain.CredentialNode {
			return domain.Errorf(domain.CodeForbidden, "a node credential can only use the node API")
		}
		if a == Admin && !p.IsAdmin() {
			return domain.Errorf(domain.CodeForbidden, "only an organization admin can do this")
		}
	}
	return nil
}

// PeerAddr is the address failed attempts are counted against: the
// connection's peer (API Gateway's sourceIp arrives as RemoteAddr through the
// adapter), never a header the client controls.
func PeerAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	if r.RemoteAddr == "" {
		return "unknown"
	}
	return r.RemoteAddr
}

type reqInfoKey struct{}

type reqInfo struct {
	id    string
	org   string
	route string
}

// RequestID returns the id of the request being served.
func RequestID(ctx context.Context) string {
	if ri, ok := ctx.Value(reqInfoKey{}).(*reqInfo); ok {
		return ri.id
	}
	return ""
}

func logger(ctx context.Context, base *slog.Logger) *slog.Logger {
	return base.With("request_id", RequestID(ctx))
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// withRequestContext gives every request an id (API Gateway's when there is
// one), recovers panics as 500s, and logs one JSON line per request.
func withRequestContext(base *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &reqInfo{id: lambdaRequestID(r.Context())}
		if ri.id == "" {
			ri.id = newRequestID()
		}
		ctx, counters := metrics.WithRequest(context.WithValue(r.Context(), reqInfoKey{}, ri))
		r = r.WithContext(ctx)
		w.Header().Set("X-Request-Id", ri.id)
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				base.ErrorContext(r.Context(), "panic", "request_id", ri.id, "panic", v)
				if sw.status == 0 {
					WriteError(sw, r, logger(r.Context(), base), domain.Internal(nil))
				}
			}
			base.InfoContext(r.Context(), "request",
				"request_id", ri.id, "method", r.Method, "path", r.URL.Path,
				"status", sw.status, "ms", time.Since(start).Milliseconds(), "org", ri.org,
				"route", ri.route, "ddb_calls", counters.DynamoCalls(), "s3_calls", counters.S3Calls(), "socket_calls", counters.SocketCalls())
		}()
		next.ServeHTTP(sw, r)
	})
}

func lambdaRequestID(ctx context.Context) string {
	var rc events.APIGatewayV2HTTPRequestContext
	var ok bool
	if rc, ok = core.GetAPIGatewayV2ContextFromContext(ctx); ok {
		return rc.RequestID
	}
	return ""
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
