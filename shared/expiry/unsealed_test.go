package expiry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/expiry"
	"github.com/envlease/envlease/shared/httpapi"
)

// Open and failed artifacts: what a client uploaded and never sealed is
// removed once its upload requests stopped working.

// newUploadEnv is newEnv with the fake clock at the real time (S3 checks
// presigned requests against it; tests move the clock forward only after the
// bytes are up), multipart with small parts, and the artifacts service's
// store optionally wrapped, to put a step of the expiry job inside a request.
func newUploadEnv(t testing.TB, wrap func(artifacts.Store) artifacts.Store) *env {
	t.Helper()
	srv := devstack.NewTestS3(t)
	out := &env{S3: srv.Client(context.Background())}
	out.Env = apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		e.Clock.Set(time.Now().UTC().Truncate(time.Second))
		out.Blobs = blob.New(blob.Options{Client: out.S3, Bucket: srv.Bucket, Clock: e.Clock})
		var st artifacts.Store = e.Store
		if wrap != nil {
			st = wrap(st)
		}
		return [][]httpapi.Route{artifacts.Routes(artifacts.NewService(st, out.Blobs, e.Clock, artifacts.Options{PartSize: blob.MinPartSize}))}
	})
	return out
}

type uploadPart struct {
	PartNumber int               `json:"partNumber"`
	Offset     int64             `json:"offset"`
	Size       int64             `json:"size"`
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers"`
}

type created struct {
	Artifact struct {
		ID string `json:"id"`
	} `json:"artifact"`
	Upload struct {
		Multipart bool         `json:"multipart"`
		Expires   time.Time    `json:"expires"`
		Parts     []uploadPart `json:"parts"`
	} `json:"upload"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// create declares data as Bob (split into parts above the part size), with
// the body's fields overridden by extra.
func (e *env) create(t testing.TB, data []byte, extra map[string]any) created {
	t.Helper()
	body := map[string]any{"name": "out.bin", "size": len(data), "sha256": digest(data)}
	if len(data) > blob.MinPartSize {
		var parts []string
		for off := 0; off < len(data); off += blob.MinPartSize {
			parts = append(parts, digest(data[off:min(off+blob.MinPartSize, len(data))]))
		}
		body["parts"] = parts
	}
	for k, v := range extra {
		body[k] = v
	}
	r := e.Do(http.MethodPost, "/v1/artifacts", apitest.BobToken, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var c created
	r.JSON(t, &c)
	return c
}

// put sends bytes with a presigned request, as a client would: plain HTTP.
func put(t testing.TB, p uploadPart, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(p.Method, p.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// objects lists what the bucket holds under an artifact's prefix.
func (e *env) objects(t testing.TB, id string) []string {
	t.Helper()
	out, err := e.S3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.Blobs.Bucket()), Prefix: aws.String(blob.Prefix("acme", id))})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// goneEverywhere checks that every request on the artifact answers 410.
func (e *env) goneEverywhere(t testing.TB, id string) {
	t.Helper()
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/v1/artifacts/" + id},
		{http.MethodPost, "/v1/artifacts/" + id + "/complete"},
		{http.MethodPost, "/v1/artifacts/" + id + "/upload"},
		{http.MethodPost, "/v1/artifacts/" + id + "/links"},
	} {
		if res := e.Do(r.method, r.path, apitest.BobToken, nil); res.Status != http.StatusGone || res.Code() != "gone" {
			t.Fatalf("%s %s: %d %s", r.method, r.path, res.Status, res.Body)
		}
	}
}

func (e *env) state(t testing.TB, id string) string {
	t.Helper()
	a, err := e.Store.GetArtifact(context.Background(), "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return a.State
}

// An upload never completed, single PUT and multipart: once its requests have
// stopped working (and the grace for those in flight is over), the job
// deletes its object, aborts its multipart upload and leaves a tombstone.
func TestAbandonedUploadsAreRemovedAfterTheirWindow(t *testing.T) {
	e := newUploadEnv(t, nil)
	start := e.Clock.Now()
	small := []byte("bytes that were uploaded but never completed\n")
	single := e.create(t, small, nil)
	if code := put(t, single.Upload.Parts[0], small); code != http.StatusOK {
		t.Fatalf("single PUT: %d", code)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (blob.MinPartSize+4096)/16)
	multi := e.create(t, big, nil)
	if !multi.Upload.Multipart || len(multi.Upload.Parts) != 2 {
		t.Fatalf("multipart upload %+v", multi.Upload)
	}
	p := multi.Upload.Parts[0]
	if code := put(t, p, big[p.Offset:p.Offset+p.Size]); code != http.StatusOK {
		t.Fatalf("part 1: %d", code)
	}
	if len(e.objects(t, single.Artifact.ID)) != 1 || e.uploads(t, blob.Prefix("acme", multi.Artifact.ID)) != 1 {
		t.Fatal("the uploads did not reach the bucket")
	}
	end := single.Upload.Expires
	if !end.Equal(start.Add(artifacts.UploadWindow)) || !multi.Upload.Expires.Equal(end) {
		t.Fatalf("windows end %s and %s, want %s", end, multi.Upload.Expires, start.Add(artifacts.UploadWindow))
	}

	// The window is over, but requests started in it may still be landing.
	e.Clock.Set(end.Add(domain.ArtifactUploadGrace - time.Second))
	if sum := run(t, e, expiry.Options{}); sum.Found != 0 {
		t.Fatalf("inside the grace: %+v", sum)
	}
	if e.state(t, single.Artifact.ID) != domain.ArtifactOpen || len(e.objects(t, single.Artifact.ID)) != 1 {
		t.Fatal("an artifact not due was touched")
	}
	// Past the window, before the job, it can no longer be completed.
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+single.Artifact.ID+"/complete", apitest.BobToken, nil); r.Status != http.StatusConflict || r.Code() != "conflict" || !strings.Contains(string(r.Body), "renew") {
		t.Fatalf("complete after the window: %d %s", r.Status, r.Body)
	}

	e.Clock.Set(end.Add(domain.ArtifactUploadGrace))
	sum := run(t, e, expiry.Options{})
	if sum.Found != 2 || sum.Expired != 2 || sum.Unsealed != 2 || sum.Objects != 1 || sum.Uploads != 1 || sum.Failed != 0 {
		t.Fatalf("summary %+v", sum)
	}
	for _, id := range []string{single.Artifact.ID, multi.Artifact.ID} {
		if keys := e.objects(t, id); len(keys) != 0 {
			t.Fatalf("%s: objects left %v", id, keys)
		}
		if n := e.uploads(t, blob.Prefix("acme", id)); n != 0 {
			t.Fatalf("%s: %d multipart uploads left", id, n)
		}
		if st := e.state(t, id); st != domain.ArtifactExpired {
			t.Fatalf("%s: state %s", id, st)
		}
		// The tombstone is kept for at least 30 days from now.
		if ttl := e.ttl(t, "acme", id); ttl.Before(e.Clock.Now().Add(30 * 24 * time.Hour)) {
			t.Fatalf("%s: ttl %s", id, ttl)
		}
		e.goneEverywhere(t, id)
	}
	// Tombstones left the due index.
	if sum := run(t, e, expiry.Options{}); sum.Found != 0 {
		t.Fatalf("second run %+v", sum)
	}
}

// A failed artifact's single-PUT request stays valid until its window ends,
// so the bytes can be sent again after the failure: the job removes them.
func TestBytesUploadedAfterAFailureAreRemoved(t *testing.T) {
	e := newUploadEnv(t, nil)
	data := []byte("eleven bytes")
	// The declared size is wrong: S3 takes the bytes (their SHA-256 is the
	// declared one), and complete fails the artifact.
	c := e.create(t, data, map[string]any{"size": len(data) - 1})
	id := c.Artifact.ID
	if code := put(t, c.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+id+"/complete", apitest.BobToken, nil); r.Status != http.StatusUnprocessableEntity || r.Code() != "invalid" {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	if st := e.state(t, id); st != domain.ArtifactFailed || len(e.objects(t, id)) != 0 {
		t.Fatalf("after the failure: state %s, objects %v", st, e.objects(t, id))
	}
	// Again, with the same request: still accepted, and stored.
	if code := put(t, c.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload after the failure: %d", code)
	}
	if keys := e.objects(t, id); len(keys) != 1 {
		t.Fatalf("objects after the second upload: %v", keys)
	}

	end := c.Upload.Expires
	e.Clock.Set(end.Add(domain.ArtifactUploadGrace - time.Second))
	if sum := run(t, e, expiry.Options{}); sum.Found != 0 || len(e.objects(t, id)) != 1 {
		t.Fatalf("inside the grace: %+v", sum)
	}
	e.Clock.Set(end.Add(domain.ArtifactUploadGrace))
	if sum := run(t, e, expiry.Options{}); sum.Found != 1 || sum.Expired != 1 || sum.Unsealed != 1 || sum.Objects != 1 {
		t.Fatalf("summary %+v", sum)
	}
	if keys := e.objects(t, id); len(keys) != 0 {
		t.Fatalf("objects left %v", keys)
	}
	if st := e.state(t, id); st != domain.ArtifactExpired {
		t.Fatalf("state %s", st)
	}
	e.goneEverywhere(t, id)
}

// Renewing the upload moves the artifact's due time: the job leaves it alone
// at the first window's end. Completed then, it is sealed; left open, it is
// removed at the end of the renewed window.
func TestRenewedUploadIsDueAtItsNewWindow(t *testing.T) {
	e := newUploadEnv(t, nil)
	start := e.Clock.Now()
	kept, dropped := []byte("completed after a renewal"), []byte("abandoned after a renewal")
	ck, cd := e.create(t, kept, nil), e.create(t, dropped, nil)
	for _, u := range []struct {
		c    created
		data []byte
	}{{ck, kept}, {cd, dropped}} {
		if code := put(t, u.c.Upload.Parts[0], u.data); code != http.StatusOK {
			t.Fatalf("upload: %d", code)
		}
	}
	firstDue := ck.Upload.Expires.Add(domain.ArtifactUploadGrace)

	e.Clock.Set(start.Add(50 * time.Minute))
	var renewedEnd time.Time
	for _, id := range []string{ck.Artifact.ID, cd.Artifact.ID} {
		r := e.Do(http.MethodPost, "/v1/artifacts/"+id+"/upload", apitest.BobToken, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("renew: %d %s", r.Status, r.Body)
		}
		var c created
		r.JSON(t, &c)
		renewedEnd = c.Upload.Expires
	}
	if !renewedEnd.Equal(start.Add(50*time.Minute + artifacts.UploadWindow)) {
		t.Fatalf("renewed window ends %s", renewedEnd)
	}

	e.Clock.Set(firstDue.Add(time.Second))
	if sum := run(t, e, expiry.Options{}); sum.Found != 0 || sum.Expired != 0 {
		t.Fatalf("at the first window's end: %+v", sum)
	}
	for _, id := range []string{ck.Artifact.ID, cd.Artifact.ID} {
		if st := e.state(t, id); st != domain.ArtifactOpen || len(e.objects(t, id)) != 1 {
			t.Fatalf("%s after the first window: state %s, objects %v", id, st, e.objects(t, id))
		}
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+ck.Artifact.ID+"/complete", apitest.BobToken, nil); r.Status != http.StatusOK || r.Map(t)["state"] != "sealed" {
		t.Fatalf("complete inside the renewed window: %d %s", r.Status, r.Body)
	}

	e.Clock.Set(renewedEnd.Add(domain.ArtifactUploadGrace))
	if sum := run(t, e, expiry.Options{}); sum.Found != 1 || sum.Expired != 1 || sum.Unsealed != 1 || sum.Objects != 1 {
		t.Fatalf("at the renewed window's end: %+v", sum)
	}
	if len(e.objects(t, cd.Artifact.ID)) != 0 || e.state(t, cd.Artifact.ID) != domain.ArtifactExpired {
		t.Fatal("the abandoned artifact was not removed at its renewed window's end")
	}
	// The sealed one is due at its expiry, as every sealed artifact.
	if e.state(t, ck.Artifact.ID) != domain.ArtifactSealed || len(e.objects(t, ck.Artifact.ID)) != 1 {
		t.Fatal("the sealed artifact was touched")
	}
	if r := e.Do(http.MethodGet, "/v1/artifacts/"+ck.Artifact.ID, apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("sealed: %d %s", r.Status, r.Body)
	}
}

// A window that ended is renewed as long as the job has not reached the
// artifact; the job, finding it renewed, leaves it alone.
func TestUploadRenewedAfterItsWindowSurvivesTheJob(t *testing.T) {
	e := newUploadEnv(t, nil)
	data := []byte("slow client")
	c := e.create(t, data, nil)
	if code := put(t, c.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	e.Clock.Set(c.Upload.Expires.Add(domain.ArtifactUploadGrace + time.Minute))
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.Artifact.ID+"/upload", apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("renew after the window: %d %s", r.Status, r.Body)
	}
	if sum := run(t, e, expiry.Options{}); sum.Found != 0 {
		t.Fatalf("run after the renewal: %+v", sum)
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.Artifact.ID+"/complete", apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
}

// hookStore runs a function before the artifacts service's seal or the
// job's abandon write, to race them deterministically.
type hookStore struct {
	artifacts.Store
	beforeSeal func()
}

func (h hookStore) SealArtifact(ctx context.Context, a domain.Artifact) error {
	if h.beforeSeal != nil {
		h.beforeSeal()
	}
	return h.Store.SealArtifact(ctx, a)
}

// A complete that read the artifact inside its window but seals after the
// job removed it is refused: no sealed artifact is ever left without its
// object.
func TestCompleteRacingTheJobSealsNothing(t *testing.T) {
	var e *env
	var runErr error
	var sum expiry.Summary
	var end time.Time
	e = newUploadEnv(t, func(st artifacts.Store) artifacts.Store {
		return hookStore{Store: st, beforeSeal: func() {
			// The complete has read the record and checked the bytes; the
			// window ends and the job runs before its seal is written.
			e.Clock.Set(end.Add(domain.ArtifactUploadGrace))
			sum, runErr = expiry.Run(context.Background(), e.Store, e.Blobs, e.Clock, expiry.Options{})
		}}
	})
	data := []byte("completed at the last moment")
	c := e.create(t, data, nil)
	end = c.Upload.Expires
	if code := put(t, c.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	e.Clock.Set(end.Add(-time.Second))
	r := e.Do(http.MethodPost, "/v1/artifacts/"+c.Artifact.ID+"/complete", apitest.BobToken, nil)
	if runErr != nil || sum.Expired != 1 || sum.Objects != 1 {
		t.Fatalf("job inside the complete: %+v %v", sum, runErr)
	}
	if r.Status != http.StatusConflict || r.Code() != "conflict" {
		t.Fatalf("complete racing the job: %d %s", r.Status, r.Body)
	}
	if st := e.state(t, c.Artifact.ID); st != domain.ArtifactExpired || len(e.objects(t, c.Artifact.ID)) != 0 {
		t.Fatalf("after the race: state %s, objects %v", st, e.objects(t, c.Artifact.ID))
	}
}

// raceStore renews the upload between the job's read of an artifact and its
// abandon write.
type raceStore struct {
	expiry.Store
	beforeAbandon func()
}

func (r *raceStore) AbandonArtifact(ctx context.Context, org, id string, uploadUntil time.Time) error {
	if r.beforeAbandon != nil {
		r.beforeAbandon()
		r.beforeAbandon = nil
	}
	return r.Store.AbandonArtifact(ctx, org, id, uploadUntil)
}

// A renewal that lands between the job's read and its write wins: the job's
// write is refused, it reads the artifact again, finds it not due and
// deletes nothing.
func TestRenewalRacingTheJobKeepsTheUpload(t *testing.T) {
	e := newUploadEnv(t, nil)
	data := []byte("renewed at the last moment")
	c := e.create(t, data, nil)
	if code := put(t, c.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	e.Clock.Set(c.Upload.Expires.Add(domain.ArtifactUploadGrace))
	st := &raceStore{Store: e.Store, beforeAbandon: func() {
		if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.Artifact.ID+"/upload", apitest.BobToken, nil); r.Status != http.StatusOK {
			t.Errorf("renew: %d %s", r.Status, r.Body)
		}
	}}
	sum, err := expiry.Run(context.Background(), st, e.Blobs, e.Clock, expiry.Options{})
	if err != nil || sum.Found != 1 || sum.NotDue != 1 || sum.Expired != 0 || sum.Objects != 0 {
		t.Fatalf("run: %+v %v", sum, err)
	}
	if s := e.state(t, c.Artifact.ID); s != domain.ArtifactOpen || len(e.objects(t, c.Artifact.ID)) != 1 {
		t.Fatalf("after the race: state %s, objects %v", s, e.objects(t, c.Artifact.ID))
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.Artifact.ID+"/complete", apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
}
