package devstack

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
)

// A port found free can be taken by another program before the child binds
// it. When something else answers there, the start is refused as an address
// in use (and StartS3 or StartDynamoLocal tries another port), never taken
// for the child answering: here the port is taken before the child starts.
func TestStartRefusesAPortAnotherProgramAnswers(t *testing.T) {
	t.Parallel()
	t.Run("versitygw", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), testStartTimeout)
		defer cancel()
		bin, err := VersityGWBinary(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Another program that answers any HTTP request, as the probe asks.
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer other.Close()
		s, err := launch(ctx, bin, strings.TrimPrefix(other.URL, "http://"), t.TempDir(), S3Options{AccessKey: "k", SecretKey: "secret-key", Bucket: TestBucket})
		if err == nil {
			s.Stop()
			t.Fatal("the gateway started on a port another program answers")
		}
		if !errors.Is(err, errAddrInUse) {
			t.Fatalf("err = %v, want the address in use", err)
		}
	})
	// DynamoDB Local binds every interface, and on a port another program
	// holds it says so and lives on without a listener.
	for _, other := range []struct {
		name   string
		listen func(t *testing.T) string
	}{
		{"DynamoDB Local, another program answering the probe", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				_, _ = w.Write([]byte(`{"TableNames":[]}`))
			}))
			t.Cleanup(srv.Close)
			return strings.TrimPrefix(srv.URL, "http://")
		}},
		{"DynamoDB Local, another program answering nothing", func(t *testing.T) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			return ln.Addr().String()
		}},
	} {
		t.Run(other.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), testStartTimeout)
			defer cancel()
			java, err := exec.LookPath("java")
			if err != nil {
				t.Fatal("java is not on PATH")
			}
			dir, err := DynamoLocalJar(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, err := launchDynamoLocal(ctx, java, dir, other.listen(t), nil)
			if err == nil {
				d.Stop()
				t.Fatal("DynamoDB Local started on a port another program holds")
			}
			if !errors.Is(err, errAddrInUse) {
				t.Fatalf("err = %v, want the address in use", err)
			}
		})
	}
}
