package clienttest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/devstack"
)

// throttledS3 starts a front for s3 on loopback that reads every request
// body at most rate bytes a second, and gives the same store reached through
// it. The front keeps the Host header the client signed (SigV4 signs it), so
// presigned URLs made for the front's address are checked by the store as
// they would be without it.
func throttledS3(t testing.TB, s3 *devstack.S3, rate int) *devstack.S3 {
	t.Helper()
	target, err := url.Parse(s3.Endpoint)
	if err != nil {
		t.Fatalf("object storage endpoint %q: %v", s3.Endpoint, err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.ContentLength != 0 {
			r.Body = &slowBody{r: r.Body, c: r.Body, rate: rate, start: time.Now()}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return &devstack.S3{Endpoint: front.URL, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket, Dir: s3.Dir}
}

// slowBody reads its body no faster than rate bytes a second since start,
// in pieces of at most a tenth of a second's worth.
type slowBody struct {
	r     io.Reader
	c     io.Closer
	rate  int
	start time.Time
	read  int64
}

func (b *slowBody) Read(p []byte) (int, error) {
	if max := b.rate / 10; len(p) > max {
		p = p[:max]
	}
	// Wait until what was read so far is due at the rate.
	due := b.start.Add(time.Duration(float64(b.read) / float64(b.rate) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

func (b *slowBody) Close() error { return b.c.Close() }
