// Package check validates HTTP responses against the API description, so a
// handler cannot answer with a status, header or body the document does not
// describe. The test harness (shared/apitest) runs it on every response of
// every handler test; the Lambda event tests run it on what the adapter
// returns.
//
// It imports only kin-openapi and shared/openapi, so the harness can import it
// without a cycle.
package check

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/envlease/envlease/shared/openapi"
)

// Validator checks responses against the document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	defaultOnce sync.Once
	defaultV    *Validator
	defaultErr  error
)

// Default returns the validator of the embedded document, loaded once.
func Default() (*Validator, error) {
	defaultOnce.Do(func() { defaultV, defaultErr = New(openapi.YAML) })
	return defaultV, defaultErr
}

// New loads a document for validation.
//
// The document is OpenAPI 3.1. kin-openapi v0.133.0 loads it and validates
// values against it, including 3.1's `type: [T, "null"]`, but its own
// document check (T.Validate) knows only 3.0 and refuses a "null" type, so it
// is not called here: the linter (TestLint) checks the document's structure
// with full 3.1 rules. The document keeps to what kin-openapi enforces (enum
// rather than const, boolean-free exclusive bounds); keywords it ignores
// (propertyNames, examples) only document.
func New(doc []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the API description: %w", err)
	}
	// Match on paths only: tests call handlers on any host.
	t.Servers = nil
	closeObjects(t)
	r, err := gorillamux.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("route the API description: %w", err)
	}
	return &Validator{doc: t, router: r}, nil
}

// closeObjects makes every object schema with listed properties and no
// additionalProperties of its own refuse properties it does not list. The
// served document leaves response objects open, because clients must tolerate
// added fields; the tests hold the service to the stricter rule, so a field
// added to a response without being described fails them.
func closeObjects(t *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, list := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, c := range list {
				walk(c)
			}
		}
	}
	for _, s := range t.Components.Schemas {
		walk(s)
	}
	for _, r := range t.Components.Responses {
		walkResponse(r, walk)
	}
	for _, item := range t.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				walkResponse(r, walk)
			}
		}
	}
}

func walkResponse(r *openapi3.ResponseRef, walk func(*openapi3.SchemaRef)) {
	if r == nil || r.Value == nil {
		return
	}
	for _, mt := range r.Value.Content {
		walk(mt.Schema)
	}
	for _, h := range r.Value.Headers {
		if h.Value != nil {
			walk(h.Value.Schema)
		}
	}
}

// Response checks one response to req. A path the document does not have must
// be the service's JSON 404, and a method a path does not have its JSON 405
// with Allow; everything else must match the operation's response for the
// status exactly: a status the operation does not list fails.
func (v *Validator) Response(req *http.Request, status int, header http.Header, body []byte) error {
	head := req.Method == http.MethodHead
	find := req
	if head {
		// Every GET answers HEAD too; the document lists the GETs.
		find = req.Clone(context.Background())
		find.Method = http.MethodGet
	}
	route, params, err := v.router.FindRoute(find)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		return v.routerError(status, http.StatusNotFound, "NotFound", header, body, head)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		if header.Get("Allow") == "" {
			return fmt.Errorf("%s %s: 405 without Allow", req.Method, req.URL.Path)
		}
		return v.routerError(status, http.StatusMethodNotAllowed, "MethodNotAllowed", header, body, head)
	case err != nil:
		return fmt.Errorf("%s %s: find the operation: %w", req.Method, req.URL.Path, err)
	}
	if status < 300 {
		if err := queryDescribed(route, find); err != nil {
			return err
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: find, PathParams: params, Route: route,
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			ExcludeResponseBody:   head,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s -> %d does not match the API description: %w\nbody: %s",
			req.Method, req.URL.Path, status, err, truncate(body, 2000))
	}
	return nil
}

// queryDescribed fails a successful request that carried a query parameter
// the operation does not describe: the service refuses unknown parameters, so
// one that succeeded is part of the API and must be in the document.
func queryDescribed(route *routers.Route, req *http.Request) error {
	declared := map[string]bool{}
	for _, ps := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, p := range ps {
			if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
				declared[p.Value.Name] = true
			}
		}
	}
	for name := range req.URL.Query() {
		if !declared[name] {
			return fmt.Errorf("%s %s succeeded with query parameter %q, which the API description does not have", req.Method, req.URL.Path, name)
		}
	}
	return nil
}

// routerError checks a 404 or 405 the router gave for a path or method the
// document does not have, against the shared error response.
func (v *Validator) routerError(status, want int, response string, header http.Header, body []byte, head bool) error {
	if status != want {
		return fmt.Errorf("a path or method the API description does not have answered %d, want %d: %s", status, want, truncate(body, 500))
	}
	if head {
		return nil
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("%d with Content-Type %q", status, ct)
	}
	var val any
	if err := json.Unmarshal(body, &val); err != nil {
		return fmt.Errorf("%d body is not JSON: %v", status, err)
	}
	r := v.doc.Components.Responses[response]
	if r == nil || r.Value == nil {
		return fmt.Errorf("the API description has no %s response", response)
	}
	if err := r.Value.Content.Get("application/json").Schema.Value.VisitJSON(val); err != nil {
		return fmt.Errorf("%d body does not match %s: %w", status, response, err)
	}
	return nil
}

// PartResponse is Response for a handler that serves only some groups of the
// API, as each Lambda does: a request for another group's path reaches its
// router's JSON 404, which the operation itself need not list.
func (v *Validator) PartResponse(req *http.Request, status int, header http.Header, body []byte) error {
	if status == http.StatusNotFound {
		if route, _, err := v.router.FindRoute(req); err == nil && route.Operation.Responses.Status(http.StatusNotFound) == nil {
			return v.routerError(status, http.StatusNotFound, "NotFound", header, body, req.Method == http.MethodHead)
		}
	}
	return v.Response(req, status, header, body)
}

// Operations lists "METHOD /path" of every operation in the document.
func (v *Validator) Operations() []string {
	var out []string
	for path, item := range v.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	return out
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
