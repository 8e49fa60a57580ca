package artifacts_test

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

// countingTransport counts HTTP requests that leave for S3.
type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// costEnv is a sealed artifact and a service whose DynamoDB calls and S3
// requests are counted.
type costEnv struct {
	*env
	id      string
	calls   *store.CallCounter
	s3Reqs  *atomic.Int64
	counted *artifacts.Service
	handler http.Handler
}

func newCostEnv(tb testing.TB) *costEnv {
	e := newEnv(tb)
	c := &costEnv{env: e, calls: store.NewCallCounter(), s3Reqs: &atomic.Int64{}}
	c.id = e.seal(tb, apitest.AliceToken, []byte("benchmark artifact"), map[string]any{"expires": "720h"}).ID()

	db := dynamodb.New(e.Store.DB().Options(), c.calls.Option)
	st := e.Store.WithClient(db)
	s3c := s3.New(e.S3.Client(context.Background()).Options(), func(o *s3.Options) {
		o.HTTPClient = &http.Client{Transport: countingTransport{base: http.DefaultTransport, n: c.s3Reqs}}
	})
	c.counted = artifacts.NewService(st, blob.New(blob.Options{Client: s3c, Bucket: e.S3.Bucket, Clock: e.Clock}), e.Clock, artifacts.Options{})
	c.handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: e.Auth}, artifacts.Routes(c.counted))
	return c
}

// TestLinkIsOneReadAndNoS3Request pins the cost of a link: one GetItem and
// local signing.
func TestLinkIsOneReadAndNoS3Request(t *testing.T) {
	c := newCostEnv(t)
	p := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin}
	for i := 0; i < 3; i++ {
		c.calls.Reset()
		before := c.s3Reqs.Load()
		if _, err := c.counted.Link(context.Background(), p, c.id, "1h"); err != nil {
			t.Fatal(err)
		}
		if got := c.calls.Counts(); len(got) != 1 || got["GetItem"] != 1 {
			t.Fatalf("DynamoDB calls per link: %v", got)
		}
		if n := c.s3Reqs.Load() - before; n != 0 {
			t.Fatalf("S3 requests per link: %d", n)
		}
	}
}

// TestUploadRenewalIsOneReadOneUpdateAndNoS3Request pins the cost of fresh
// upload URLs: one GetItem, one conditional UpdateItem (the new window's end,
// which moves the artifact's cleanup) and local signing, for a single PUT and
// for every part of a multipart upload.
func TestUploadRenewalIsOneReadOneUpdateAndNoS3Request(t *testing.T) {
	c := newCostEnv(t)
	p := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin}
	single := c.create(t, apitest.AliceToken, []byte("open artifact"), nil).ID()
	multi := c.create(t, apitest.AliceToken, bytes.Repeat([]byte{3}, 2*blob.MinPartSize+1), nil).ID()
	for id, parts := range map[string]int{single: 1, multi: 3} {
		c.calls.Reset()
		before := c.s3Reqs.Load()
		out, err := c.counted.Upload(context.Background(), p, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Upload.Parts) != parts {
			t.Fatalf("%d parts renewed, want %d", len(out.Upload.Parts), parts)
		}
		if got := c.calls.Counts(); len(got) != 2 || got["GetItem"] != 1 || got["UpdateItem"] != 1 {
			t.Fatalf("DynamoDB calls per renewal: %v", got)
		}
		if n := c.s3Reqs.Load() - before; n != 0 {
			t.Fatalf("S3 requests per renewal: %d", n)
		}
	}
}

// BenchmarkLink is the service's work for one link: the read and the signing.
func BenchmarkLink(b *testing.B) {
	c := newCostEnv(b)
	p := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin}
	ctx := context.Background()
	c.calls.Reset()
	before := c.s3Reqs.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.counted.Link(ctx, p, c.id, "1h"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(c.calls.Total())/float64(b.N), "dynamodb-calls/op")
	b.ReportMetric(float64(c.s3Reqs.Load()-before)/float64(b.N), "s3-requests/op")
}

// BenchmarkLinkHTTP is the whole request through the HTTP stack, with token
// authentication (one BatchGetItem) in front of the link's own read.
func BenchmarkLinkHTTP(b *testing.B) {
	c := newCostEnv(b)
	c.calls.Reset()
	before := c.s3Reqs.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Handler = c.handler
		if r := c.Do(http.MethodPost, "/v1/artifacts/"+c.id+"/links", apitest.AliceToken, map[string]any{"expires": "1h"}); r.Status != 200 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(c.calls.Total())/float64(b.N), "dynamodb-calls/op")
	b.ReportMetric(float64(c.s3Reqs.Load()-before)/float64(b.N), "s3-requests/op")
}
