package lambdatest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Gateway is an HTTP API stage over the functions: it turns each request into
// the payload format 2.0 event API Gateway sends, on the route the template
// gives its path, and the function's answer back into the HTTP response.
type Gateway struct {
	Routes    []Route
	Functions map[string]*Function // by logical id
	// OnInvoke, if set, sees every invocation (for tests of the events).
	OnInvoke func(fn string, status int)
}

// route picks the function as API Gateway does: an exact route (or one whose
// {param} segments match) first, then
// the longest greedy {proxy+} prefix, then $default.
func (g *Gateway) route(method, p string) (Route, bool) {
	var best Route
	bestLen := -1
	for _, r := range g.Routes {
		if r.Key == "$default" {
			if bestLen < 0 {
				best, bestLen = r, 0
			}
			continue
		}
		m, rp, ok := strings.Cut(r.Key, " ")
		if !ok || (m != "ANY" && m != method) {
			continue
		}
		if prefix, greedy := strings.CutSuffix(rp, "/{proxy+}"); greedy {
			if strings.HasPrefix(p, prefix+"/") && len(p) > len(prefix)+1 && len(prefix) >= bestLen {
				best, bestLen = r, len(prefix)+1
			}
			continue
		}
		if p == rp || templateMatch(rp, p) {
			return r, true
		}
	}
	return best, bestLen >= 0
}

// templateMatch reports whether p matches a route path with {param}
// segments (/v1/environments/{id}/identity), each standing for one whole
// segment: API Gateway prefers such a route to a greedy {proxy+} one.
func templateMatch(route, p string) bool {
	if !strings.Contains(route, "{") {
		return false
	}
	rs, ps := strings.Split(route, "/"), strings.Split(p, "/")
	if len(rs) != len(ps) {
		return false
	}
	for i := range rs {
		if strings.HasPrefix(rs[i], "{") && strings.HasSuffix(rs[i], "}") {
			if ps[i] == "" {
				return false
			}
			continue
		}
		if rs[i] != ps[i] {
			return false
		}
	}
	return true
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r, ok := g.route(req.Method, req.URL.Path)
	if !ok {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return
	}
	fn := g.Functions[r.Function]
	if fn == nil {
		http.Error(w, `{"message":"Internal Server Error"}`, http.StatusInternalServerError)
		return
	}
	ev, err := HTTPEvent(req, r.Key)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	payload, _ := json.Marshal(ev)
	out, err := fn.Invoke(req.Context(), payload)
	if err != nil {
		// API Gateway's answer to a failed integration.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"message":"Internal Server Error"}`))
		if g.OnInvoke != nil {
			g.OnInvoke(fn.Name, -1)
		}
		return
	}
	var res events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &res); err != nil || res.StatusCode == 0 {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, `{"message":"malformed Lambda proxy response"}`)
		return
	}
	if g.OnInvoke != nil {
		g.OnInvoke(fn.Name, res.StatusCode)
	}
	WriteResponse(w, res)
}

// WriteResponse writes a Lambda proxy response as API Gateway does.
func WriteResponse(w http.ResponseWriter, res events.APIGatewayV2HTTPResponse) {
	h := w.Header()
	for k, v := range res.Headers {
		h.Set(k, v)
	}
	for k, vs := range res.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range res.Cookies {
		h.Add("Set-Cookie", c)
	}
	body := []byte(res.Body)
	if res.IsBase64Encoded {
		body, _ = base64.StdEncoding.DecodeString(res.Body)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(res.StatusCode)
	w.Write(body)
}

// HTTPEvent is the payload format 2.0 event of req on the route key.
func HTTPEvent(req *http.Request, routeKey string) (events.APIGatewayV2HTTPRequest, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 10<<20))
	if err != nil {
		return events.APIGatewayV2HTTPRequest{}, err
	}
	headers := map[string]string{}
	keys := make([]string, 0, len(req.Header))
	for k := range req.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cookies []string
	for _, k := range keys {
		if strings.EqualFold(k, "Cookie") {
			for _, c := range req.Header.Values(k) {
				for _, part := range strings.Split(c, ";") {
					cookies = append(cookies, strings.TrimSpace(part))
				}
			}
			continue
		}
		headers[strings.ToLower(k)] = strings.Join(req.Header.Values(k), ",")
	}
	headers["host"] = req.Host
	headers["x-forwarded-proto"] = "https"
	ip, _, _ := strings.Cut(req.RemoteAddr, ":")
	headers["x-forwarded-for"] = ip
	now := time.Now().UTC()
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       routeKey,
		RawPath:        req.URL.EscapedPath(),
		RawQueryString: req.URL.RawQuery,
		Cookies:        cookies,
		Headers:        headers,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: routeKey, AccountID: "123456789012", Stage: "$default",
			RequestID: newRequestID()[:16], APIID: "local", DomainName: req.Host, DomainPrefix: "local",
			Time: now.Format("02/Jan/2006:15:04:05 -0700"), TimeEpoch: now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: req.Method, Path: req.URL.Path, Protocol: "HTTP/1.1",
				SourceIP: ip, UserAgent: req.UserAgent(),
			},
		},
	}
	if len(req.URL.Query()) > 0 {
		ev.QueryStringParameters = map[string]string{}
		for k, v := range req.URL.Query() {
			ev.QueryStringParameters[k] = strings.Join(v, ",")
		}
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return ev, nil
}
