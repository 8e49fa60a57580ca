package nodes

import (
	"net/http"

	"github.com/envlease/envlease/shared/domain"
)

// logKind is which log of an environment a node keeps: its log (the
// default) or, with ?kind=network, its network log (docs/nodes.md,
// "Network boundary"), each an artifact linked from its own field.
type logKind struct {
	name, contentType string
	field             func(*domain.Environment) *string
}

var (
	envLog     = logKind{"log", "text/plain; charset=utf-8", func(e *domain.Environment) *string { return &e.Log }}
	networkLog = logKind{"network log", "application/x-ndjson", func(e *domain.Environment) *string { return &e.NetworkLog }}
)

// logKindOf reads the kind a request names.
func logKindOf(r *http.Request) (logKind, error) {
	q := r.URL.Query()
	for k := range q {
		if k != "kind" {
			return logKind{}, domain.BadRequest(k, "unknown query parameter %q: a kept log takes only kind", k)
		}
	}
	switch q.Get("kind") {
	case "", "log":
		return envLog, nil
	case "network":
		return networkLog, nil
	}
	return logKind{}, domain.BadRequest("kind", "kind must be log (the default) or network")
}
