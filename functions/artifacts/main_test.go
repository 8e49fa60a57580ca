package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
)

// exampleID is the artifact the sample events name.
const exampleID = "art_example0000000000000"

func readEvent(t *testing.T, file string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, file, &ev)
	return ev
}

func TestLambdaEvents(t *testing.T) {
	e := apitest.New(t, nil)
	// S3 checks presigned requests against real time.
	e.Clock.Set(time.Now().UTC().Truncate(time.Second))
	srv := devstack.NewTestS3(t)
	ctx := context.Background()
	blobs := blob.New(blob.Options{Client: srv.Client(ctx), Bucket: srv.Bucket, Clock: e.Clock})
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, blobs, e.Clock, e.Log)).ProxyWithContext)

	// The artifact the sample events name, sealed, with its object.
	data := []byte("hello\n")
	key := blob.Key("acme", exampleID)
	if _, err := srv.Client(ctx).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	a := domain.Artifact{
		ID: exampleID, OrgID: "acme", Name: "hello.txt", Size: 6, SHA256: "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
		ContentType: "text/plain", Labels: map[string]string{}, CreatedBy: "alice", Created: e.Clock.Now(),
		Expires: e.Clock.Now().Add(24 * time.Hour), State: domain.ArtifactOpen, Key: key, Chunks: 1,
	}
	if err := e.Store.PutArtifact(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.SealArtifact(ctx, a); err != nil {
		t.Fatal(err)
	}

	call := func(t *testing.T, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		t.Helper()
		res, err := proxy(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cases := []struct {
		file   string
		status int
		want   string
	}{
		{"artifacts-create.json", 201, `"multipart":false`},
		{"artifacts-list.json", 200, `"id":"` + exampleID + `"`},
		{"artifacts-get.json", 200, `"state":"sealed"`},
		{"artifacts-complete.json", 409, `"code":"conflict"`},
		{"artifacts-upload.json", 409, `"code":"conflict"`}, // the example artifact is sealed
		{"artifacts-link.json", 200, `"url":"http`},
		{"keys-create.json", 404, `"code":"not_found"`}, // another group's route
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			res := call(t, readEvent(t, c.file))
			if res.StatusCode != c.status || res.Headers["Content-Type"] != "application/json" || !strings.Contains(res.Body, c.want) {
				t.Fatalf("status %d headers %v body %s", res.StatusCode, res.Headers, res.Body)
			}
			if c.file == "artifacts-link.json" {
				var l domain.Link
				if err := json.Unmarshal([]byte(res.Body), &l); err != nil {
					t.Fatal(err)
				}
				if got := get(t, l.URL); !bytes.Equal(got, data) {
					t.Fatalf("download %q", got)
				}
			}
		})
	}

	// The whole flow through the function: create, renew the upload URLs (as
	// a client slower than the first ones would), upload, complete.
	res := call(t, readEvent(t, "artifacts-create.json"))
	var created struct {
		Artifact domain.Artifact `json:"artifact"`
		Upload   struct {
			Parts []struct {
				Method, URL string
				Headers     map[string]string
			}
		}
	}
	if err := json.Unmarshal([]byte(res.Body), &created); err != nil {
		t.Fatal(err)
	}
	ev := readEvent(t, "artifacts-upload.json")
	ev.RawPath = strings.Replace(ev.RawPath, exampleID, created.Artifact.ID, 1)
	ev.RequestContext.HTTP.Path = ev.RawPath
	ev.PathParameters = map[string]string{"proxy": created.Artifact.ID + "/upload"}
	res = call(t, ev)
	if res.StatusCode != 200 || !strings.Contains(res.Body, `"state":"open"`) {
		t.Fatalf("renew upload: %d %s", res.StatusCode, res.Body)
	}
	if err := json.Unmarshal([]byte(res.Body), &created); err != nil {
		t.Fatal(err)
	}
	p := created.Upload.Parts[0]
	req, _ := http.NewRequest(p.Method, p.URL, bytes.NewReader(data))
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	up, err := http.DefaultClient.Do(req)
	if err != nil || up.StatusCode != 200 {
		t.Fatalf("upload: %v %v", up, err)
	}
	up.Body.Close()
	ev = readEvent(t, "artifacts-complete.json")
	ev.RawPath = strings.Replace(ev.RawPath, exampleID, created.Artifact.ID, 1)
	ev.RequestContext.HTTP.Path = ev.RawPath
	ev.PathParameters = map[string]string{"proxy": created.Artifact.ID + "/complete"}
	if res := call(t, ev); res.StatusCode != 200 || !strings.Contains(res.Body, `"state":"sealed"`) {
		t.Fatalf("complete: %d %s", res.StatusCode, res.Body)
	}
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET link: %d %s", res.StatusCode, b)
	}
	return b
}
