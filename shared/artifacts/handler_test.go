package artifacts_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
)

// env is the API over minidyn and a real S3 gateway. The fake clock starts at
// the real time, because S3 compares presigned requests with real time; tests
// move it forward only for rules that DynamoDB-side expiry decides.
type env struct {
	*apitest.Env
	S3  *devstack.S3
	Svc *artifacts.Service
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := devstack.NewTestS3(t)
	return newEnvWith(t, srv, srv.Client(context.Background()))
}

func newEnvWith(t testing.TB, srv *devstack.S3, client *s3.Client) *env {
	t.Helper()
	out := &env{S3: srv}
	out.Env = apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		e.Clock.Set(time.Now().UTC().Truncate(time.Second))
		bucket := devstack.TestBucket
		if srv != nil {
			bucket = srv.Bucket
		}
		blobs := blob.New(blob.Options{Client: client, Bucket: bucket, Clock: e.Clock})
		// A small part size, so multipart is exercised with a few MiB.
		out.Svc = artifacts.NewService(e.Store, blobs, e.Clock, artifacts.Options{PartSize: blob.MinPartSize})
		return [][]httpapi.Route{artifacts.Routes(out.Svc)}
	})
	return out
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
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
	Artifact map[string]any `json:"artifact"`
	Upload   struct {
		Multipart bool         `json:"multipart"`
		PartSize  int64        `json:"partSize"`
		Expires   time.Time    `json:"expires"`
		Parts     []uploadPart `json:"parts"`
	} `json:"upload"`
}

func (c created) ID() string { return c.Artifact["id"].(string) }

// create declares data (split into parts when it is larger than a part).
func (e *env) create(t testing.TB, token string, data []byte, extra map[string]any) created {
	t.Helper()
	body := map[string]any{"name": "build/out.tar.gz", "project": "web", "contentType": "application/gzip",
		"labels": map[string]string{"branch": "main"}, "size": len(data), "sha256": sum(data)}
	if len(data) > blob.MinPartSize {
		var parts []string
		for off := 0; off < len(data); off += blob.MinPartSize {
			parts = append(parts, sum(data[off:min(off+blob.MinPartSize, len(data))]))
		}
		body["parts"] = parts
	}
	for k, v := range extra {
		body[k] = v
	}
	res := e.Do(http.MethodPost, "/v1/artifacts", token, body)
	if res.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.Status, res.Body)
	}
	var c created
	res.JSON(t, &c)
	return c
}

// put sends one presigned upload with plain net/http: no SDK, no credentials.
func put(t testing.TB, p uploadPart, body []byte) (int, http.Header) {
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
	return res.StatusCode, res.Header
}

func (e *env) upload(t testing.TB, c created, data []byte) {
	t.Helper()
	for _, p := range c.Upload.Parts {
		if code, _ := put(t, p, data[p.Offset:p.Offset+p.Size]); code != http.StatusOK {
			t.Fatalf("upload part %d: %d", p.PartNumber, code)
		}
	}
}

func (e *env) seal(t testing.TB, token string, data []byte, extra map[string]any) created {
	t.Helper()
	c := e.create(t, token, data, extra)
	e.upload(t, c, data)
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", token, nil); r.Status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	return c
}

// download fetches a URL with a plain GET and no credentials.
func download(t *testing.T, u string) (int, []byte) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

type link struct {
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

func (e *env) link(t *testing.T, token, id string, body any) (*apitest.Response, link) {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/artifacts/"+id+"/links", token, body)
	var l link
	if r.Status == http.StatusOK {
		r.JSON(t, &l)
	}
	return r, l
}

func TestSinglePutCreateUploadSealLink(t *testing.T) {
	e := newEnv(t)
	data := []byte("the exact bytes of a small artifact\n")
	c := e.create(t, apitest.AliceToken, data, nil)
	a := c.Artifact
	if a["state"] != "open" || a["createdBy"] != "alice" || a["chunks"] != 1.0 || a["sealed"] != nil {
		t.Fatalf("open artifact %v", a)
	}
	if c.Upload.Multipart || len(c.Upload.Parts) != 1 || c.Upload.Parts[0].Method != http.MethodPut {
		t.Fatalf("upload %+v", c.Upload)
	}
	// The object lives under the organization's prefix and asks for SSE-S3.
	p := c.Upload.Parts[0]
	if !strings.Contains(p.URL, "/orgs/acme/artifacts/"+c.ID()+"/") || p.Headers["x-amz-server-side-encryption"] != "AES256" || p.Headers["x-amz-checksum-sha256"] == "" {
		t.Fatalf("presigned upload %+v", p)
	}
	// Completing before anything is uploaded is refused, and the artifact stays open.
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil); r.Status != 422 || r.Code() != "invalid" {
		t.Fatalf("early complete: %d %s", r.Status, r.Body)
	}
	e.upload(t, c, data)
	if _, err := os.Stat(filepath.Join(e.S3.Dir, e.S3.Bucket, "orgs", "acme", "artifacts", c.ID(), "data")); err != nil {
		t.Fatalf("object not under the org prefix: %v", err)
	}
	r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil)
	if r.Status != 200 {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	sealed := r.Map(t)
	for _, f := range []string{"id", "project", "name", "size", "sha256", "contentType", "labels", "keyVersion", "manifest", "segments", "chunks", "sealedBytes", "createdBy", "created", "expires"} {
		if _, ok := sealed[f]; !ok {
			t.Errorf("sealed artifact lacks %q", f)
		}
	}
	if sealed["state"] != "sealed" || sealed["size"] != float64(len(data)) || sealed["sha256"] != sum(data) ||
		sealed["sealedBytes"] != float64(len(data)) || sealed["chunks"] != 1.0 || sealed["keyVersion"] != 1.0 ||
		sealed["contentType"] != "application/gzip" || !strings.HasPrefix(sealed["manifest"].(string), "sha256/full-object:") {
		t.Fatalf("sealed %v", sealed)
	}
	if segs := sealed["segments"].([]any); len(segs) != 1 || segs[0].(map[string]any)["size"] != float64(len(data)) {
		t.Fatalf("segments %v", segs)
	}
	// Default expiry: 7 days.
	if exp, _ := time.Parse(time.RFC3339, sealed["expires"].(string)); !exp.Equal(e.Clock.Now().Add(7 * 24 * time.Hour)) {
		t.Fatalf("expires %v", sealed["expires"])
	}
	if g := e.Do(http.MethodGet, "/v1/artifacts/"+c.ID(), apitest.BobToken, nil); g.Status != 200 || g.Map(t)["state"] != "sealed" {
		t.Fatalf("get: %d %s", g.Status, g.Body)
	}

	// Immutable: no second seal, and the upload URL cannot replace the bytes.
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil); r.Status != 409 || r.Code() != "conflict" {
		t.Fatalf("second complete: %d %s", r.Status, r.Body)
	}
	other := []byte("other bytes of the very same length!\n")[:len(data)]
	if code, _ := put(t, p, other); code != http.StatusBadRequest {
		t.Fatalf("re-upload of other bytes: %d", code)
	}

	// A member's link downloads the exact bytes with a plain GET.
	lr, l := e.link(t, apitest.BobToken, c.ID(), map[string]any{"expires": "10m"})
	if lr.Status != 200 || lr.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("link: %d %s", lr.Status, lr.Body)
	}
	if !l.Expires.Equal(e.Clock.Now().Add(10 * time.Minute)) {
		t.Fatalf("link expires %v", l.Expires)
	}
	code, got := download(t, l.URL)
	if code != 200 || !bytes.Equal(got, data) {
		t.Fatalf("download: %d %q", code, got)
	}
}

func TestMultipartCreateUploadSeal(t *testing.T) {
	e := newEnv(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), (2*blob.MinPartSize+1000)/16)
	c := e.create(t, apitest.AliceToken, data, nil)
	if !c.Upload.Multipart || len(c.Upload.Parts) != 3 || c.Artifact["chunks"] != 3.0 || c.Upload.PartSize != blob.MinPartSize {
		t.Fatalf("upload %+v chunks %v", c.Upload, c.Artifact["chunks"])
	}
	// Two of three parts: completing says which is missing and keeps the upload.
	var etags []map[string]any
	for _, p := range c.Upload.Parts[:2] {
		code, h := put(t, p, data[p.Offset:p.Offset+p.Size])
		if code != 200 {
			t.Fatalf("part %d: %d", p.PartNumber, code)
		}
		etags = append(etags, map[string]any{"partNumber": p.PartNumber, "etag": h.Get("ETag")})
	}
	r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, map[string]any{})
	if r.Status != 422 || !strings.Contains(string(r.Body), "part 3") {
		t.Fatalf("incomplete: %d %s", r.Status, r.Body)
	}
	p := c.Upload.Parts[2]
	code, h := put(t, p, data[p.Offset:p.Offset+p.Size])
	if code != 200 {
		t.Fatalf("part 3: %d", code)
	}
	etags = append(etags, map[string]any{"partNumber": 3, "etag": h.Get("ETag")})
	// The client passes the ETags S3 gave it.
	r = e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, map[string]any{"parts": etags})
	if r.Status != 200 {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	a := r.Map(t)
	if a["state"] != "sealed" || a["chunks"] != 3.0 || a["size"] != float64(len(data)) || !strings.HasPrefix(a["manifest"].(string), "sha256/composite:") || !strings.HasSuffix(a["manifest"].(string), "-3") {
		t.Fatalf("sealed %v", a)
	}
	_, l := e.link(t, apitest.AliceToken, c.ID(), nil)
	if code, got := download(t, l.URL); code != 200 || !bytes.Equal(got, data) {
		t.Fatalf("download: %d, %d bytes", code, len(got))
	}
}

func TestMultipartCompleteWithoutETags(t *testing.T) {
	e := newEnv(t)
	data := bytes.Repeat([]byte{7}, blob.MinPartSize+1)
	c := e.seal(t, apitest.AliceToken, data, nil) // complete with no body: the service lists the parts
	if g := e.Do(http.MethodGet, "/v1/artifacts/"+c.ID(), apitest.AliceToken, nil); g.Map(t)["chunks"] != 2.0 {
		t.Fatalf("get: %s", g.Body)
	}
}

func TestMismatchSealsNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The declared size is wrong: S3 accepts the bytes (their SHA-256 is the
	// declared one) but sealing compares S3's size with the declaration.
	data := []byte("eleven bytes")
	c := e.create(t, apitest.AliceToken, data, map[string]any{"size": len(data) - 1})
	if code, _ := put(t, c.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil)
	if r.Status != 422 || r.Code() != "invalid" || !strings.Contains(string(r.Body), "nothing was sealed") {
		t.Fatalf("size mismatch: %d %s", r.Status, r.Body)
	}
	e.assertNothingSealed(t, c.ID())
	if _, err := e.S3.Client(ctx).HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(e.S3.Bucket), Key: aws.String(blob.Key("acme", c.ID()))}); err == nil {
		t.Fatal("mismatching object was kept")
	}

	// Bytes that reached the key some other way than the presigned request.
	c2 := e.create(t, apitest.AliceToken, data, nil)
	if _, err := e.S3.Client(ctx).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.S3.Bucket), Key: aws.String(blob.Key("acme", c2.ID())), Body: strings.NewReader("twelve bytes")}); err != nil {
		t.Fatal(err)
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c2.ID()+"/complete", apitest.AliceToken, nil); r.Status != 422 {
		t.Fatalf("sha mismatch: %d %s", r.Status, r.Body)
	}
	e.assertNothingSealed(t, c2.ID())

	// And bytes that do not match never get stored at all: S3 refuses them.
	c3 := e.create(t, apitest.AliceToken, data, nil)
	if code, _ := put(t, c3.Upload.Parts[0], []byte("ELEVEN BYTES")); code != http.StatusBadRequest {
		t.Fatalf("wrong bytes accepted by S3: %d", code)
	}
}

func (e *env) assertNothingSealed(t *testing.T, id string) {
	t.Helper()
	g := e.Do(http.MethodGet, "/v1/artifacts/"+id, apitest.AliceToken, nil)
	if g.Status != 200 || g.Map(t)["state"] != "failed" || g.Map(t)["sealed"] != nil {
		t.Fatalf("after mismatch: %d %s", g.Status, g.Body)
	}
	var list struct{ Artifacts []map[string]any }
	e.Do(http.MethodGet, "/v1/artifacts", apitest.AliceToken, nil).JSON(t, &list)
	for _, a := range list.Artifacts {
		if a["id"] == id {
			t.Fatal("failed artifact is listed")
		}
	}
	if r, _ := e.link(t, apitest.AliceToken, id, nil); r.Status != 409 {
		t.Fatalf("link to failed artifact: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+id+"/complete", apitest.AliceToken, nil); r.Status != 409 {
		t.Fatalf("complete after failure: %d %s", r.Status, r.Body)
	}
}

func TestListNewestFirstPagedAndScoped(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := 0; i < 4; i++ {
		c := e.seal(t, apitest.AliceToken, []byte{byte(i)}, nil)
		ids = append(ids, c.ID())
		e.Clock.Advance(time.Second)
	}
	short := e.seal(t, apitest.AliceToken, []byte("short-lived"), map[string]any{"expires": "1h"})
	e.create(t, apitest.AliceToken, []byte("never completed"), nil)
	e.seal(t, apitest.CarolToken, []byte("globex's"), nil)

	type page struct {
		Artifacts []map[string]any `json:"artifacts"`
		Next      string           `json:"next"`
	}
	var all page
	e.Do(http.MethodGet, "/v1/artifacts", apitest.BobToken, nil).JSON(t, &all)
	want := []string{short.ID(), ids[3], ids[2], ids[1], ids[0]}
	if got := idsOf(all.Artifacts); strings.Join(got, ",") != strings.Join(want, ",") || all.Next != "" {
		t.Fatalf("list %v next %q, want %v", got, all.Next, want)
	}
	// Paged by 2, following next.
	var got []string
	next := ""
	for pages := 0; ; pages++ {
		var p page
		q := "/v1/artifacts?limit=2"
		if next != "" {
			q += "&cursor=" + url.QueryEscape(next)
		}
		r := e.Do(http.MethodGet, q, apitest.AliceToken, nil)
		if r.Status != 200 {
			t.Fatalf("page: %d %s", r.Status, r.Body)
		}
		r.JSON(t, &p)
		got = append(got, idsOf(p.Artifacts)...)
		if p.Next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		next = p.Next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged %v, want %v", got, want)
	}
	// After an hour the short-lived one is gone from the list, and 410 to
	// reads and links, though no job has run.
	e.Clock.Advance(time.Hour)
	e.Do(http.MethodGet, "/v1/artifacts", apitest.AliceToken, nil).JSON(t, &all)
	if g := idsOf(all.Artifacts); len(g) != 4 || g[0] != ids[3] {
		t.Fatalf("after expiry: %v", g)
	}
	if r := e.Do(http.MethodGet, "/v1/artifacts/"+short.ID(), apitest.AliceToken, nil); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("get expired: %d %s", r.Status, r.Body)
	}
	// Another organization sees only its own.
	var globex page
	e.Do(http.MethodGet, "/v1/artifacts", apitest.CarolToken, nil).JSON(t, &globex)
	if len(globex.Artifacts) != 1 || globex.Artifacts[0]["name"] != "build/out.tar.gz" || globex.Artifacts[0]["id"] == ids[0] {
		t.Fatalf("globex sees %v", globex.Artifacts)
	}
	for _, c := range []struct{ q, code string }{
		{"limit=0", "bad_request"}, {"limit=x", "bad_request"}, {"limit=201", "bad_request"}, {"cursor=garbage", "bad_request"}, {"next=x", "bad_request"},
	} {
		if r := e.Do(http.MethodGet, "/v1/artifacts?"+c.q, apitest.AliceToken, nil); r.Status != 400 || r.Code() != c.code {
			t.Errorf("%s: %d %s", c.q, r.Status, r.Body)
		}
	}
}

func idsOf(as []map[string]any) []string {
	var out []string
	for _, a := range as {
		out = append(out, a["id"].(string))
	}
	return out
}

func TestLinkRules(t *testing.T) {
	e := newEnv(t)
	now := e.Clock.Now()
	long := e.seal(t, apitest.AliceToken, []byte("long"), map[string]any{"expires": "720h"})
	short := e.seal(t, apitest.AliceToken, []byte("short"), map[string]any{"expires": now.Add(2 * time.Hour).Format(time.RFC3339)})
	open := e.create(t, apitest.AliceToken, []byte("open"), nil)

	cases := []struct {
		name   string
		id     string
		token  string
		body   any
		status int
		code   string
		want   time.Duration // link expiry from now
	}{
		{"requested", long.ID(), apitest.AliceToken, map[string]any{"expires": "90m"}, 200, "", 90 * time.Minute},
		{"default", long.ID(), apitest.AliceToken, nil, 200, "", time.Hour},
		{"capped at 7 days", long.ID(), apitest.AliceToken, map[string]any{"expires": "720h"}, 200, "", 7 * 24 * time.Hour},
		{"timestamp", long.ID(), apitest.AliceToken, map[string]any{"expires": now.Add(3 * time.Hour).Format(time.RFC3339)}, 200, "", 3 * time.Hour},
		{"capped at the artifact", short.ID(), apitest.AliceToken, map[string]any{"expires": "24h"}, 200, "", 2 * time.Hour},
		{"unparseable", long.ID(), apitest.AliceToken, map[string]any{"expires": "soon"}, 400, "bad_request", 0},
		{"not a string", long.ID(), apitest.AliceToken, `{"expires": 60}`, 400, "bad_request", 0},
		{"unknown field", long.ID(), apitest.AliceToken, `{"expire": "1h"}`, 400, "bad_request", 0},
		{"zero", long.ID(), apitest.AliceToken, map[string]any{"expires": "0s"}, 422, "invalid", 0},
		{"negative", long.ID(), apitest.AliceToken, map[string]any{"expires": "-1h"}, 422, "invalid", 0},
		{"past", long.ID(), apitest.AliceToken, map[string]any{"expires": now.Add(-time.Minute).Format(time.RFC3339)}, 422, "invalid", 0},
		{"unknown id", "art_doesnotexist", apitest.AliceToken, nil, 404, "not_found", 0},
		{"other org", long.ID(), apitest.CarolToken, nil, 404, "not_found", 0},
		{"not sealed", open.ID(), apitest.AliceToken, nil, 409, "conflict", 0},
		{"no token", long.ID(), "", nil, 401, "unauthorized", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, l := e.link(t, c.token, c.id, c.body)
			if r.Status != c.status || r.Code() != c.code {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
			if c.status == 200 && !l.Expires.Equal(now.Add(c.want)) {
				t.Fatalf("expires %v, want now+%v", l.Expires, c.want)
			}
			if c.status >= 400 && strings.Contains(string(r.Body), "amz") {
				t.Fatalf("internal text: %s", r.Body)
			}
		})
	}
	// Past the artifact's expiry: 410 gone, from the record alone (TTL is lazy
	// and no expiry job has run).
	e.Clock.Advance(2 * time.Hour)
	if r, _ := e.link(t, apitest.AliceToken, short.ID(), nil); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("expired artifact: %d %s", r.Status, r.Body)
	}
	// The expiry job's tombstone answers 410 too.
	if err := e.Store.ExpireArtifact(context.Background(), "acme", long.ID(), e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.link(t, apitest.AliceToken, long.ID(), nil); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("tombstone: %d %s", r.Status, r.Body)
	}
}

func TestLinkRefusedAfterItsExpiry(t *testing.T) {
	e := newEnv(t)
	data := []byte("for a few seconds")
	c := e.seal(t, apitest.AliceToken, data, nil)
	// S3 checks real time, and the link is signed at the clock's: the
	// clock is set to real time now, not when the stack was built (the
	// seal, against DynamoDB Local on a loaded machine, takes seconds), and
	// the link lives long enough for one request after it is made.
	e.Clock.Set(time.Now())
	_, l := e.link(t, apitest.AliceToken, c.ID(), map[string]any{"expires": "5s"})
	if code, got := download(t, l.URL); code != 200 || !bytes.Equal(got, data) {
		t.Fatalf("fresh (%s before its expiry): %d %q", time.Until(l.Expires), code, got)
	}
	// Wait it out.
	time.Sleep(time.Until(l.Expires) + time.Second)
	if code, _ := download(t, l.URL); code != http.StatusForbidden {
		t.Fatalf("after expiry: %d", code)
	}
}

func TestCreateValidation(t *testing.T) {
	e := newEnv(t)
	good := func(over map[string]any) map[string]any {
		b := map[string]any{"name": "a", "size": 3, "sha256": sum([]byte("abc"))}
		for k, v := range over {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	cases := []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"no name", good(map[string]any{"name": nil}), 422, "name"},
		{"control char", good(map[string]any{"name": "a\nb"}), 422, "name"},
		{"no size", good(map[string]any{"size": nil}), 422, "size"},
		{"negative size", good(map[string]any{"size": -1}), 422, "size"},
		{"too large", good(map[string]any{"size": int64(artifacts.MaxSize) + 1}), 422, "size"},
		{"bad sha", good(map[string]any{"sha256": "abc"}), 422, "sha256"},
		{"bad label", good(map[string]any{"labels": map[string]string{"Bad Key": "x"}}), 422, "labels"},
		{"bad content type", good(map[string]any{"contentType": "not a type"}), 422, "contentType"},
		{"expires too far", good(map[string]any{"expires": "2400h"}), 422, "expires"},
		{"expires zero", good(map[string]any{"expires": "0s"}), 422, "expires"},
		{"expires within a minute", good(map[string]any{"expires": "30s"}), 422, "expires"},
		{"expires unparseable", good(map[string]any{"expires": "next week"}), 400, "expires"},
		{"parts for a small file", good(map[string]any{"parts": []string{sum([]byte("abc"))}}), 422, "parts"},
		{"parts missing", good(map[string]any{"size": blob.MinPartSize + 1}), 422, "parts"},
		{"unknown field", `{"name":"a","size":1,"sha256":"` + sum(nil) + `","colour":"red"}`, 400, "colour"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do(http.MethodPost, "/v1/artifacts", apitest.AliceToken, c.body)
			var b httpapi.ErrorBody
			r.JSON(t, &b)
			if r.Status != c.status || b.Field != c.field {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}
	// Without contentType the artifact is application/octet-stream, and the
	// presigned upload signs that content type.
	r := e.Do(http.MethodPost, "/v1/artifacts", apitest.AliceToken, good(nil))
	var plain created
	r.JSON(t, &plain)
	if r.Status != 201 || plain.Artifact["contentType"] != "application/octet-stream" || plain.Upload.Parts[0].Headers["content-type"] != "application/octet-stream" {
		t.Fatalf("default content type: %d %s", r.Status, r.Body)
	}
	// An empty file without labels is fine, and the maximum expiry is accepted.
	c := e.seal(t, apitest.AliceToken, []byte{}, map[string]any{"expires": "2160h", "labels": nil})
	g := e.Do(http.MethodGet, "/v1/artifacts/"+c.ID(), apitest.AliceToken, nil)
	if m := g.Map(t); g.Status != 200 || m["size"] != 0.0 || len(m["labels"].(map[string]any)) != 0 {
		t.Fatalf("empty artifact: %d %s", g.Status, g.Body)
	}
}

func TestSealedItemIsIndexedForListingAndExpiry(t *testing.T) {
	e := newEnv(t)
	c := e.seal(t, apitest.AliceToken, []byte("indexed"), map[string]any{"expires": "48h"})
	open := e.create(t, apitest.AliceToken, []byte("open"), nil)
	item := func(id string) map[string]types.AttributeValue {
		out, err := e.Store.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(e.Store.Table()),
			Key:       map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "ORG#acme"}, "SK": &types.AttributeValueMemberS{Value: "ARTIFACT#" + id}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	s := func(av types.AttributeValue) string {
		if v, ok := av.(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		if v, ok := av.(*types.AttributeValueMemberN); ok {
			return v.Value
		}
		return ""
	}
	exp := e.Clock.Now().Add(48 * time.Hour)
	it := item(c.ID())
	if s(it["GSI1PK"]) != "ORG#acme#ARTIFACTS" || s(it["GSI2PK"]) != e.Store.ArtifactDuePartition("acme", c.ID()) ||
		s(it["GSI2SK"]) != store.ArtifactDueSK(exp, "acme", c.ID()) || s(it["ttl"]) != jsonNum(exp.Add(30*24*time.Hour).Unix()) {
		t.Fatalf("sealed item %v", it)
	}
	// An open item is not listed, but it is due once its upload requests
	// stopped working (and those started before then had time to land).
	openDue := open.Upload.Expires.Add(domain.ArtifactUploadGrace)
	if o := item(open.ID()); o["GSI1PK"] != nil || s(o["GSI2PK"]) != e.Store.ArtifactDuePartition("acme", open.ID()) || s(o["GSI2SK"]) != store.ArtifactDueSK(openDue, "acme", open.ID()) {
		t.Fatalf("open item: %v", o)
	}
	// The expiry job's query: due artifacts by GSI2 range in each partition
	// of the due index (earliest first within one).
	for _, want := range []string{open.ID(), c.ID()} {
		part := e.Store.ArtifactDuePartition("acme", want)
		due, err := e.Store.DB().Query(context.Background(), &dynamodb.QueryInput{
			TableName: aws.String(e.Store.Table()), IndexName: aws.String(store.IndexGSI2),
			KeyConditionExpression: aws.String("GSI2PK = :pk AND GSI2SK < :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: part}, ":now": &types.AttributeValueMemberS{Value: store.DueSortKey(exp.Add(time.Second))},
			},
		})
		found := false
		for _, it := range due.Items {
			found = found || s(it["SK"]) == "ARTIFACT#"+want
		}
		if err != nil || !found {
			t.Fatalf("due query of %s: %v %v", part, due, err)
		}
	}
	// The index projects keys only; the job gets the base items.
	got, _, err := e.Store.DueArtifacts(context.Background(), e.Store.ArtifactDuePartition("acme", c.ID()), exp.Add(time.Second), 100, "")
	full := false
	for _, a := range got {
		full = full || a.ID == c.ID() && a.State == domain.ArtifactSealed && a.Key != "" && !a.Created.IsZero()
	}
	if err != nil || !full {
		t.Fatalf("due artifacts: %+v %v", got, err)
	}
	if err := e.Store.ExpireArtifact(context.Background(), "acme", c.ID(), exp); err != nil {
		t.Fatal(err)
	}
	it = item(c.ID())
	if s(it["state"]) != "expired" || it["GSI1PK"] != nil || it["GSI2PK"] != nil || s(it["ttl"]) != jsonNum(exp.Add(30*24*time.Hour).Unix()) {
		t.Fatalf("tombstone state=%q ttl=%s gsi1=%v gsi2=%v", s(it["state"]), s(it["ttl"]), it["GSI1PK"], it["GSI2PK"])
	}
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestUnreachableS3Is503(t *testing.T) {
	client := s3.NewFromConfig(aws.Config{Region: devstack.Region, Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), RetryMaxAttempts: 1}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.UsePathStyle = true
	})
	e := newEnvWith(t, nil, client)
	// Multipart creation calls S3.
	big := bytes.Repeat([]byte{1}, blob.MinPartSize+1)
	r := e.Do(http.MethodPost, "/v1/artifacts", apitest.AliceToken, map[string]any{
		"name": "x", "size": len(big), "sha256": sum(big), "parts": []string{sum(big[:blob.MinPartSize]), sum(big[blob.MinPartSize:])},
	})
	if r.Status != 503 || r.Code() != "unavailable" || r.Header.Get("Retry-After") == "" || strings.Contains(string(r.Body), "127.0.0.1") {
		t.Fatalf("create multipart: %d %s", r.Status, r.Body)
	}
	// A single PUT is presigned locally, but completing it asks S3.
	c := e.create(t, apitest.AliceToken, []byte("x"), nil)
	r = e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil)
	if r.Status != 503 || r.Code() != "unavailable" || r.Header.Get("Retry-After") == "" || strings.Contains(string(r.Body), "dial") {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	if g := e.Do(http.MethodGet, "/v1/artifacts/"+c.ID(), apitest.AliceToken, nil); g.Map(t)["state"] != "open" {
		t.Fatalf("after outage: %s", g.Body)
	}
}

func TestSnapshotLookupAndLink(t *testing.T) {
	e := newEnv(t)
	data := []byte("snapshot tarball")
	c := e.seal(t, apitest.AliceToken, data, nil)
	ctx := context.Background()
	a, err := e.Store.GetArtifact(ctx, "acme", c.ID())
	if err != nil || !a.UsableAt(e.Clock.Now()) {
		t.Fatalf("snapshot %v %v", a, err)
	}
	if _, err := e.Store.GetArtifact(ctx, "globex", c.ID()); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Fatalf("other org: %v", err)
	}
	l, err := e.Svc.LinkFor(ctx, a, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code, got := download(t, l.URL); code != 200 || !bytes.Equal(got, data) {
		t.Fatalf("download: %d %q", code, got)
	}
	if a.UsableAt(a.Expires) {
		t.Fatal("usable at its expiry")
	}
}

// renew asks for fresh presigned uploads of an open artifact.
func (e *env) renew(t testing.TB, token, id string, body any) (*apitest.Response, created) {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/artifacts/"+id+"/upload", token, body)
	var c created
	if r.Status == http.StatusOK {
		r.JSON(t, &c)
	}
	return r, c
}

// A client slower than the upload window gets fresh URLs for the same
// artifact instead of starting over.
func TestUploadRenewedAfterTheFirstURLsExpired(t *testing.T) {
	e := newEnv(t)
	data := []byte("bytes uploaded after the first URLs expired\n")
	// Created more than an hour ago (S3 compares signatures with real
	// time): the URLs of the answer are already expired.
	start := e.Clock.Now()
	e.Clock.Set(start.Add(-artifacts.UploadWindow - time.Minute))
	c := e.create(t, apitest.AliceToken, data, nil)
	e.Clock.Set(start)
	if code, _ := put(t, c.Upload.Parts[0], data); code != http.StatusForbidden {
		t.Fatalf("upload with the expired URL: %d", code)
	}

	r, fresh := e.renew(t, apitest.AliceToken, c.ID(), nil)
	if r.Status != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("renew: %d %s", r.Status, r.Body)
	}
	if fresh.ID() != c.ID() || fresh.Artifact["state"] != "open" || fresh.Upload.Multipart || len(fresh.Upload.Parts) != 1 ||
		fresh.Upload.PartSize != c.Upload.PartSize || !fresh.Upload.Expires.Equal(start.Add(artifacts.UploadWindow)) {
		t.Fatalf("renewed %+v", fresh)
	}
	p, old := fresh.Upload.Parts[0], c.Upload.Parts[0]
	if p.URL == old.URL || p.Size != old.Size || p.Offset != old.Offset || !sameHeaders(p.Headers, old.Headers) ||
		p.Headers["x-amz-checksum-sha256"] == "" || p.Headers["x-amz-server-side-encryption"] != "AES256" {
		t.Fatalf("renewed part %+v, first %+v", p, old)
	}
	// An empty body is the same as none.
	if r, _ := e.renew(t, apitest.AliceToken, c.ID(), `{}`); r.Status != http.StatusOK {
		t.Fatalf("renew with {}: %d %s", r.Status, r.Body)
	}
	// The renewed URL still signs the declared SHA-256: other bytes are refused.
	if code, _ := put(t, p, []byte(strings.ToUpper(string(data)))); code != http.StatusBadRequest {
		t.Fatalf("other bytes with the renewed URL: %d", code)
	}
	e.upload(t, fresh, data)
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil); r.Status != http.StatusOK || r.Map(t)["state"] != "sealed" {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	_, l := e.link(t, apitest.BobToken, c.ID(), nil)
	if code, got := download(t, l.URL); code != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("download: %d %q", code, got)
	}
}

func sameHeaders(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Renewing a multipart upload re-presigns the parts of the same S3 upload:
// a part sent with the first URLs stays, and one sent again replaces it.
func TestMultipartUploadRenewedKeepsTheUpload(t *testing.T) {
	e := newEnv(t)
	data := bytes.Repeat([]byte("fedcba9876543210"), (blob.MinPartSize+4096)/16)
	c := e.create(t, apitest.AliceToken, data, nil)
	if !c.Upload.Multipart || len(c.Upload.Parts) != 2 {
		t.Fatalf("upload %+v", c.Upload)
	}
	first := c.Upload.Parts[0]
	if code, _ := put(t, first, data[first.Offset:first.Offset+first.Size]); code != http.StatusOK {
		t.Fatalf("part 1 with the first URL: %d", code)
	}

	// A second later, so the signatures differ.
	e.Clock.Advance(time.Second)
	r, fresh := e.renew(t, apitest.BobToken, c.ID(), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("renew: %d %s", r.Status, r.Body)
	}
	if !fresh.Upload.Multipart || fresh.Upload.PartSize != c.Upload.PartSize || len(fresh.Upload.Parts) != 2 {
		t.Fatalf("renewed %+v", fresh.Upload)
	}
	uploadID := func(p uploadPart) string {
		u, err := url.Parse(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query().Get("uploadId")
	}
	for i, p := range fresh.Upload.Parts {
		old := c.Upload.Parts[i]
		if p.PartNumber != old.PartNumber || p.Offset != old.Offset || p.Size != old.Size || p.URL == old.URL ||
			uploadID(p) == "" || uploadID(p) != uploadID(old) || !sameHeaders(p.Headers, old.Headers) {
			t.Fatalf("part %d renewed %+v, first %+v", i+1, p, old)
		}
	}
	second := fresh.Upload.Parts[1]
	if code, _ := put(t, second, data[second.Offset:second.Offset+second.Size]); code != http.StatusOK {
		t.Fatalf("part 2 with the renewed URL: %d", code)
	}
	// Part 1 again with its renewed URL: S3 keeps the last.
	again := fresh.Upload.Parts[0]
	if code, _ := put(t, again, data[again.Offset:again.Offset+again.Size]); code != http.StatusOK {
		t.Fatalf("part 1 again with the renewed URL: %d", code)
	}
	r = e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	if a := r.Map(t); a["state"] != "sealed" || a["chunks"] != 2.0 || !strings.HasSuffix(a["manifest"].(string), "-2") {
		t.Fatalf("sealed %v", a)
	}
	_, l := e.link(t, apitest.AliceToken, c.ID(), nil)
	if code, got := download(t, l.URL); code != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("download: %d, %d bytes", code, len(got))
	}
}

func TestUploadRenewalRules(t *testing.T) {
	e := newEnv(t)
	sealed := e.seal(t, apitest.AliceToken, []byte("sealed"), nil)
	open := e.create(t, apitest.AliceToken, []byte("open"), nil)
	short := e.create(t, apitest.AliceToken, []byte("short-lived"), map[string]any{"expires": "1h"})
	// A failed one: the declared size is wrong, so completing fails it.
	data := []byte("eleven bytes")
	failed := e.create(t, apitest.AliceToken, data, map[string]any{"size": len(data) - 1})
	if code, _ := put(t, failed.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+failed.ID()+"/complete", apitest.AliceToken, nil); r.Status != 422 {
		t.Fatalf("complete of the wrong size: %d %s", r.Status, r.Body)
	}

	cases := []struct {
		name   string
		id     string
		token  string
		body   any
		status int
		code   string
	}{
		{"open", open.ID(), apitest.BobToken, nil, 200, ""},
		{"sealed", sealed.ID(), apitest.AliceToken, nil, 409, "conflict"},
		{"failed", failed.ID(), apitest.AliceToken, nil, 409, "conflict"},
		{"unknown id", "art_doesnotexist", apitest.AliceToken, nil, 404, "not_found"},
		{"other org", open.ID(), apitest.CarolToken, nil, 404, "not_found"},
		{"a field", open.ID(), apitest.AliceToken, map[string]any{"parts": []string{}}, 400, "bad_request"},
		{"not an object", open.ID(), apitest.AliceToken, `[]`, 400, "bad_request"},
		{"no token", open.ID(), "", nil, 401, "unauthorized"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := e.renew(t, c.token, c.id, c.body)
			if r.Status != c.status || r.Code() != c.code {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
			if c.status >= 400 && strings.Contains(string(r.Body), "amz") {
				t.Fatalf("internal text: %s", r.Body)
			}
		})
	}
	// Near its expiry the URLs end with the artifact; past it, 410 gone from
	// the record alone (no expiry job has run).
	e.Clock.Advance(59 * time.Minute)
	if r, c := e.renew(t, apitest.AliceToken, short.ID(), nil); r.Status != 200 || !c.Upload.Expires.Equal(e.Clock.Now().Add(time.Minute)) {
		t.Fatalf("renew near expiry: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(time.Minute)
	if r, _ := e.renew(t, apitest.AliceToken, short.ID(), nil); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("expired: %d %s", r.Status, r.Body)
	}
	// The expiry job's tombstone answers 410 too.
	if err := e.Store.ExpireArtifact(context.Background(), "acme", open.ID(), e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.renew(t, apitest.AliceToken, open.ID(), nil); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("tombstone: %d %s", r.Status, r.Body)
	}
}
