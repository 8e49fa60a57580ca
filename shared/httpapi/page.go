package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/envlease/envlease/shared/domain"
)

// Page is what a paginated list request asks for: at most Limit items (0: the
// endpoint's default), after Cursor, the `next` of the previous page.
type Page struct {
	Limit  int
	Cursor string
}

// ParsePage reads `limit` and `cursor` from a list request, refusing any query
// parameter other than those and extra, and a limit outside 1..max, with 400.
func ParsePage(r *http.Request, max int, extra ...string) (Page, url.Values, error) {
	// URL.Query drops what it cannot decode; a malformed query is refused
	// instead, so a mangled cursor is never read as "no cursor".
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return Page{}, nil, domain.BadRequest("query", "the query string is not valid URL encoding")
	}
	allowed := append([]string{"limit", "cursor"}, extra...)
	for k := range q {
		if !slices.Contains(allowed, k) {
			return Page{}, nil, domain.BadRequest(k, "unknown query parameter %q; this list takes %s", k, strings.Join(allowed, ", "))
		}
	}
	p := Page{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			return Page{}, nil, domain.BadRequest("limit", "limit must be a whole number between 1 and %d", max)
		}
		p.Limit = n
	}
	return p, q, nil
}
