package federation

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/clock"
)

// An issuer's discovery document is read to maxDocumentBytes at most: a
// longer one is a fetch failure, not memory the exchange fills.
func TestDiscoveryDocumentIsBounded(t *testing.T) {
	cases := []struct {
		name      string
		pad       int
		wantFetch bool
	}{
		{"small", 10, false},
		{"over the bound", maxDocumentBytes + 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(`{"issuer":"` + srv.URL + `","jwks_uri":"` + srv.URL + `/keys","pad":"` + strings.Repeat("x", c.pad) + `"}`))
			}))
			defer srv.Close()
			v := NewVerifiers(srv.Client(), clock.System{})
			_, err := v.Verify(context.Background(), srv.URL, "not.a.token")
			var fetch errFetch
			if got := errors.As(err, &fetch); got != c.wantFetch {
				t.Fatalf("err %v: a fetch failure %v, want %v", err, got, c.wantFetch)
			}
		})
	}
}
