package client_test

import (
	"os"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// webTemplate is the template the examples lease: it serves its workdir,
// /workspace, over HTTP on its export web, and its share src lands in it at
// src/, so what was shared can be read back through the export.
var webTemplate = domain.Template{
	Name: "web", Description: "serves its workdir, where the share src lands",
	Command: []string{"sh", "-c", `exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
	Workdir: "/workspace", Runtime: "process",
	Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
	Exports:  map[string]domain.Export{"web": {}},
	Shares:   []domain.TemplateShare{{Name: "src", Path: "/workspace/src", Direction: "in"}},
	Quota:    domain.Quota{MaxLeases: 4},
}

// TestMain runs the whole service in this process for the examples, which
// read the API's URL and token from ENVLEASE_URL and ENVLEASE_TOKEN as the
// envlease command does: here they are this stack's and a member's token.
// The other tests serve their own canned answers and ignore it.
func TestMain(m *testing.M) {
	os.Exit(clienttest.Main(m, func(s *clienttest.Stack) {
		os.Setenv("ENVLEASE_URL", s.URL)
		os.Setenv("ENVLEASE_TOKEN", clienttest.BobToken)
	}, clienttest.WithTemplates("acme", webTemplate, tickerTemplate)))
}
