package apitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
)

// recordingT collects what CheckedHandler reports instead of failing the test.
type recordingT struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingT) Helper() {}

// CheckedHandler passes answers through unchanged and reports, over real
// HTTP, an answer the API description does not describe.
func TestCheckedHandlerReportsUndescribedAnswers(t *testing.T) {
	quotas := `{"quotas":[{"template":"shell","maxLeases":2,"running":0,"idle":"30m","hard":"6h"}]}`
	cases := []struct {
		name, path, body string
		status           int
		wantErr          string
	}{
		{"described", "/v1/quotas", quotas, 200, ""},
		{"field not described", "/v1/quotas", strings.Replace(quotas, `"running":0`, `"running":0,"secret":1`, 1), 200, "secret"},
		{"status not listed", "/v1/quotas", `{"error":"x","code":"teapot"}`, 418, "418"},
		{"unknown path answering 200", "/v1/nope", `{}`, 200, "404"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := &recordingT{TB: t}
			h := apitest.CheckedHandler(rt, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Request-Id", "req-1")
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			res, err := http.Get(srv.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != c.status || string(got) != c.body || res.Header.Get("X-Request-Id") != "req-1" {
				t.Fatalf("answer changed: %d %v %s", res.StatusCode, res.Header, got)
			}
			switch {
			case c.wantErr == "" && len(rt.errs) > 0:
				t.Fatalf("described answer refused: %v", rt.errs)
			case c.wantErr != "" && (len(rt.errs) == 0 || !strings.Contains(strings.Join(rt.errs, "\n"), c.wantErr)):
				t.Fatalf("want a report naming %q, got %v", c.wantErr, rt.errs)
			}
		})
	}
}
