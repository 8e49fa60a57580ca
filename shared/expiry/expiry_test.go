package expiry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/expiry"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

// env is the artifacts API over minidyn and versitygw, with the expiry job's
// object storage beside it.
type env struct {
	*apitest.Env
	S3    *s3.Client
	Blobs *blob.Store
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := devstack.NewTestS3(t)
	out := &env{S3: srv.Client(context.Background())}
	out.Env = apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		out.Blobs = blob.New(blob.Options{Client: out.S3, Bucket: srv.Bucket, Clock: e.Clock})
		return [][]httpapi.Route{artifacts.Routes(artifacts.NewService(e.Store, out.Blobs, e.Clock, artifacts.Options{}))}
	})
	return out
}

// seed stores a sealed artifact of org expiring at expires, with its object
// in S3 (and, with leftover, an unfinished multipart upload under its prefix).
func (e *env) seed(t testing.TB, org, id string, expires time.Time, leftover bool) domain.Artifact {
	t.Helper()
	ctx := context.Background()
	data := []byte("artifact " + id)
	now := e.Clock.Now()
	a := domain.Artifact{
		ID: id, OrgID: org, Name: id + ".tar", Size: int64(len(data)), SHA256: "00", ContentType: "application/x-tar",
		KeyVersion: domain.ArtifactKeyVersion, CreatedBy: "user:bob", Created: now.Add(-time.Hour), Expires: expires,
		State: domain.ArtifactOpen, Key: blob.Key(org, id), Segments: []domain.Segment{{Name: "data", Size: int64(len(data)), Objects: 1}},
	}
	if err := e.Store.PutArtifact(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.Blobs.Bucket()), Key: aws.String(a.Key), Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	if leftover {
		if _, err := e.S3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
			Bucket: aws.String(e.Blobs.Bucket()), Key: aws.String(blob.Prefix(org, id) + "retry"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	sealed := now.Add(-time.Hour)
	a.Sealed = &sealed
	if err := e.Store.SealArtifact(ctx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (e *env) objectExists(t testing.TB, key string) bool {
	t.Helper()
	_, err := e.Blobs.Head(context.Background(), key)
	if errors.Is(err, blob.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func (e *env) uploads(t testing.TB, prefix string) int {
	t.Helper()
	out, err := e.S3.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(e.Blobs.Bucket()), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}

// ttl reads the raw ttl attribute of an artifact item.
func (e *env) ttl(t testing.TB, org, id string) time.Time {
	t.Helper()
	out, err := e.Store.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.Store.Table()), ConsistentRead: aws.Bool(true),
		Key: map[string]dynamodbtypes.AttributeValue{
			store.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: "ORG#" + org},
			store.AttrSK: &dynamodbtypes.AttributeValueMemberS{Value: "ARTIFACT#" + id},
		},
	})
	if err != nil || out.Item == nil {
		t.Fatalf("get %s: %v", id, err)
	}
	n, ok := out.Item[store.AttrTTL].(*dynamodbtypes.AttributeValueMemberN)
	if !ok {
		t.Fatalf("%s has no numeric ttl: %v", id, out.Item[store.AttrTTL])
	}
	var secs int64
	fmt.Sscan(n.Value, &secs)
	return time.Unix(secs, 0).UTC()
}

func run(t testing.TB, e *env, opts expiry.Options) expiry.Summary {
	t.Helper()
	sum, err := expiry.Run(context.Background(), e.Store, e.Blobs, e.Clock, opts)
	if err != nil {
		t.Fatalf("expiry: %v (%+v)", err, sum)
	}
	return sum
}

func TestExpiryDeletesObjectsAndLeavesTombstonesThatAnswer410(t *testing.T) {
	e := newEnv(t)
	now := e.Clock.Now()
	old := e.seed(t, "acme", "art_old", now.Add(-time.Minute), true)
	edge := e.seed(t, "acme", "art_edge", now, false) // expires exactly now: gone
	fresh := e.seed(t, "acme", "art_fresh", now.Add(time.Hour), false)

	sum := run(t, e, expiry.Options{})
	if sum.Found != 2 || sum.Expired != 2 || sum.Objects != 2 || sum.Uploads != 1 || sum.Failed != 0 || sum.Pages != len(e.Store.ArtifactDuePartitions()) {
		t.Fatalf("summary %+v", sum)
	}
	for _, a := range []domain.Artifact{old, edge} {
		if e.objectExists(t, a.Key) || e.uploads(t, blob.Prefix("acme", a.ID)) != 0 {
			t.Fatalf("%s: objects or uploads left", a.ID)
		}
		got, err := e.Store.GetArtifact(context.Background(), "acme", a.ID)
		if err != nil || got.State != domain.ArtifactExpired {
			t.Fatalf("%s: %+v %v", a.ID, got, err)
		}
		// The tombstone is kept for at least 30 days from now.
		if ttl := e.ttl(t, "acme", a.ID); ttl.Before(now.Add(30 * 24 * time.Hour)) {
			t.Fatalf("%s: ttl %s is under 30 days away", a.ID, ttl)
		}
	}
	if !e.objectExists(t, fresh.Key) {
		t.Fatal("an artifact not due lost its object")
	}

	// Spec rule 2: 410, now and 29 days on; another organization gets 404.
	for _, at := range []time.Duration{0, 29 * 24 * time.Hour} {
		e.Clock.Set(now.Add(at))
		if res := e.Do(http.MethodPost, "/v1/artifacts/art_old/links", apitest.BobToken, map[string]any{"expires": "1h"}); res.Status != http.StatusGone || res.Code() != "gone" {
			t.Fatalf("link at +%s: %d %s", at, res.Status, res.Body)
		}
		if res := e.Do(http.MethodGet, "/v1/artifacts/art_edge", apitest.BobToken, nil); res.Status != http.StatusGone {
			t.Fatalf("get at +%s: %d %s", at, res.Status, res.Body)
		}
	}
	if res := e.Do(http.MethodGet, "/v1/artifacts/art_old", apitest.CarolToken, nil); res.Status != http.StatusNotFound {
		t.Fatalf("other org: %d", res.Status)
	}
	// Tombstones left the due index: a later run finds only what came due since.
	e.Clock.Set(now)
	if sum := run(t, e, expiry.Options{}); sum.Found != 0 {
		t.Fatalf("second run %+v", sum)
	}
}

// Two runs at once over the same due artifacts, in pages: every artifact is
// expired exactly once, none fails, and nothing is left in S3.
func TestConcurrentExpiryRunsAreSafe(t *testing.T) {
	e := newEnv(t)
	now := e.Clock.Now()
	var seeded []domain.Artifact
	for i := range 25 {
		org := "acme"
		if i%5 == 0 {
			org = "globex"
		}
		seeded = append(seeded, e.seed(t, org, fmt.Sprintf("art_%03d", i), now.Add(-time.Duration(i+1)*time.Minute), i%7 == 0))
	}
	var wg sync.WaitGroup
	sums := make([]expiry.Summary, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i], errs[i] = expiry.Run(context.Background(), e.Store, e.Blobs, e.Clock, expiry.Options{PageSize: 10, Workers: 3})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("runs: %v / %v", errs[0], errs[1])
	}
	t.Logf("run 1 %+v; run 2 %+v", sums[0], sums[1])
	// Each run accounts for every artifact it found, and between them they
	// expired all 25. A run may find fewer than 25: a tombstone leaves the due
	// index, so a page read after the other run expired something no longer
	// holds it. (Both may count one artifact as expired when they reach it at
	// the same moment: ExpireArtifact's write is conditioned on the state it
	// read, which a fresh tombstone also satisfies. The outcome is the same
	// tombstone either way.)
	for i, s := range sums {
		if s.Found > 25 || s.Expired+s.AlreadyExpired != s.Found || s.Failed != 0 || s.UploadCleanupFailed != 0 {
			t.Fatalf("run %d: %+v", i+1, s)
		}
	}
	if sums[0].Expired+sums[1].Expired < 25 {
		t.Fatalf("expired %d + %d, want at least 25 in all", sums[0].Expired, sums[1].Expired)
	}
	for _, a := range seeded {
		got, err := e.Store.GetArtifact(context.Background(), a.OrgID, a.ID)
		if err != nil || got.State != domain.ArtifactExpired || e.objectExists(t, a.Key) || e.uploads(t, blob.Prefix(a.OrgID, a.ID)) != 0 {
			t.Fatalf("%s/%s: state %s err %v, or objects left", a.OrgID, a.ID, got.State, err)
		}
	}
	if sum := run(t, e, expiry.Options{PageSize: 10}); sum.Found != 0 || sum.Pages != len(e.Store.ArtifactDuePartitions()) {
		t.Fatalf("after: %+v", sum)
	}
}

// 25 due in pages of 2: each partition of the due index read with continuation.
func TestExpiryPages(t *testing.T) {
	e := newEnv(t)
	now := e.Clock.Now()
	due := map[string]int{}
	for i := range 25 {
		id := fmt.Sprintf("art_p%03d", i)
		e.seed(t, "acme", id, now.Add(-time.Duration(i+1)*time.Second), false)
		due[e.Store.ArtifactDuePartition("acme", id)]++
	}
	// A partition of n due takes n/2 full pages and one more that ends it.
	pages := 0
	for _, part := range e.Store.ArtifactDuePartitions() {
		pages += due[part]/2 + 1
	}
	if sum := run(t, e, expiry.Options{PageSize: 2}); sum.Found != 25 || sum.Expired != 25 || sum.Pages != pages {
		t.Fatalf("%+v, want %d pages", sum, pages)
	}
}
