package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
)

// fakeStorage is the API's artifact routes and an object store in one
// server: create answers presigned parts pointing at /s3/, each signed with
// its part's checksum header, which the store checks like S3 does.
type fakeStorage struct {
	t        *testing.T
	url      string
	partSize int64
	// failFirst answers the first PUT of every part with this status.
	failFirst int
	// expires is the upload's expiry in create's answer.
	expires time.Time

	mu        sync.Mutex
	created   client.ArtifactCreate
	objects   map[int][]byte
	puts      map[int]int
	renewals  int
	completed []client.CompletedPart
	sealed    bool
	// corrupt makes downloads return other bytes than the upload.
	corrupt bool
}

func (f *fakeStorage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/artifacts":
		if err := json.NewDecoder(r.Body).Decode(&f.created); err != nil {
			f.t.Errorf("create body: %v", err)
		}
		json.NewEncoder(w).Encode(map[string]any{"artifact": f.artifact(), "upload": f.upload()})
	case r.Method == "POST" && r.URL.Path == "/v1/artifacts/art_1/upload":
		f.renewals++
		f.expires = time.Now().Add(time.Hour)
		json.NewEncoder(w).Encode(map[string]any{"artifact": f.artifact(), "upload": f.upload()})
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/s3/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/s3/"))
		f.puts[n]++
		body, _ := io.ReadAll(r.Body)
		if f.failFirst != 0 && f.puts[n] == 1 {
			w.WriteHeader(f.failFirst)
			io.WriteString(w, `<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
		sum := sha256.Sum256(body)
		if r.Header.Get("x-amz-checksum-sha256") != base64.StdEncoding.EncodeToString(sum[:]) || r.Header.Get("Authorization") != "" {
			w.WriteHeader(400)
			io.WriteString(w, `<Error><Code>BadDigest</Code><Message>The SHA256 you specified did not match the calculated checksum.</Message><RequestId>s3-req-1</RequestId></Error>`)
			return
		}
		f.objects[n] = body
		w.Header().Set("ETag", fmt.Sprintf(`"etag-%d"`, n))
	case r.Method == "POST" && r.URL.Path == "/v1/artifacts/art_1/complete":
		var body struct {
			Parts []client.CompletedPart `json:"parts"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		f.completed = body.Parts
		f.sealed = true
		json.NewEncoder(w).Encode(f.artifact())
	case r.Method == "GET" && r.URL.Path == "/v1/artifacts/art_1":
		json.NewEncoder(w).Encode(f.artifact())
	case r.Method == "POST" && r.URL.Path == "/v1/artifacts/art_1/links":
		json.NewEncoder(w).Encode(map[string]any{"url": f.url + "/download?X-Amz-Signature=x", "expires": time.Now().Add(time.Hour)})
	case r.Method == "GET" && r.URL.Path == "/download":
		data := f.data()
		if f.corrupt {
			data = append([]byte("x"), data[1:]...)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	default:
		f.t.Errorf("unexpected %s %s", r.Method, r.URL)
		w.WriteHeader(404)
	}
}

func (f *fakeStorage) artifact() map[string]any {
	state := "open"
	if f.sealed {
		state = "sealed"
	}
	return map[string]any{"id": "art_1", "name": f.created.Name, "size": f.created.Size, "sha256": f.created.SHA256, "state": state}
}

func (f *fakeStorage) upload() map[string]any {
	var parts []map[string]any
	for i, off := 0, int64(0); off < f.created.Size || i == 0; i, off = i+1, off+f.partSize {
		size := min(f.partSize, f.created.Size-off)
		digest := f.created.SHA256
		if len(f.created.Parts) > 0 {
			digest = f.created.Parts[i]
		}
		raw, _ := hex.DecodeString(digest)
		parts = append(parts, map[string]any{"partNumber": i + 1, "offset": off, "size": size, "sha256": digest, "method": "PUT",
			"url": fmt.Sprintf("%s/s3/%d?X-Amz-Signature=x", f.url, i+1), "headers": map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(raw)}})
	}
	return map[string]any{"multipart": len(parts) > 1, "partSize": f.partSize, "expires": f.expires, "parts": parts}
}

func (f *fakeStorage) data() []byte {
	var all []byte
	for i := 1; i <= len(f.objects); i++ {
		all = append(all, f.objects[i]...)
	}
	return all
}

func newStorage(t *testing.T, partSize int64) (*fakeStorage, *client.Client, *recorder) {
	f := &fakeStorage{t: t, partSize: partSize, objects: map[int][]byte{}, puts: map[int]int{}, expires: time.Now().Add(time.Hour)}
	c, rec := newClient(t, f)
	f.url = strings.TrimSuffix(c.BaseURL(), "/")
	return f, c, rec
}

func TestPushAndPull(t *testing.T) {
	cases := []struct {
		name      string
		size      int
		partSize  int64
		failFirst int
		parts     int
	}{
		{"empty file", 0, 8, 0, 1},
		{"one PUT", 5, 8, 0, 1},
		{"exactly one part", 8, 8, 0, 1},
		{"multipart", 21, 8, 0, 3},
		{"object storage's 503 is retried", 21, 8, 503, 3},
		{"and its 500", 5, 8, 500, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, cl, rec := newStorage(t, c.partSize)
			f.failFirst = c.failFirst
			data := bytes.Repeat([]byte("0123456789abcdefghij"), 2)[:c.size]
			var last, total int64
			a, err := cl.Push(context.Background(), bytes.NewReader(data), int64(len(data)), client.ArtifactCreate{Name: "a.bin", Expires: "1h"},
				client.PushOptions{PartSize: c.partSize, Progress: func(done, tot int64) { last, total = done, tot }})
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if f.created.SHA256 != hex.EncodeToString(sum[:]) || f.created.Size != int64(len(data)) || f.created.Name != "a.bin" || f.created.Expires != "1h" {
				t.Fatalf("declared %+v", f.created)
			}
			if (len(f.created.Parts) > 0) != (c.parts > 1) || len(f.objects) != c.parts || !bytes.Equal(f.data(), data) {
				t.Fatalf("declared parts %v, stored %d objects %q", f.created.Parts, len(f.objects), f.data())
			}
			if c.parts > 1 && len(f.completed) != c.parts || c.parts == 1 && f.completed != nil {
				t.Fatalf("completed with %v", f.completed)
			}
			if a.State != "sealed" || last != int64(len(data)) || total != int64(len(data)) {
				t.Fatalf("artifact %+v, progress %d/%d", a, last, total)
			}
			if c.failFirst != 0 && len(rec.waits) != c.parts {
				t.Fatalf("waits %v for %d parts failing once", rec.waits, c.parts)
			}

			var out bytes.Buffer
			if _, err := cl.Pull(context.Background(), "art_1", &out, client.PullOptions{}); err != nil || !bytes.Equal(out.Bytes(), data) {
				t.Fatalf("pull: %q %v", out.Bytes(), err)
			}
		})
	}
}

func TestPullRefusesOtherBytes(t *testing.T) {
	f, cl, _ := newStorage(t, 8)
	if _, err := cl.Push(context.Background(), strings.NewReader("hello"), 5, client.ArtifactCreate{Name: "h"}, client.PushOptions{PartSize: 8}); err != nil {
		t.Fatal(err)
	}
	f.corrupt = true
	_, err := cl.Pull(context.Background(), "art_1", io.Discard, client.PullOptions{})
	if !errors.Is(err, client.ErrChecksum) {
		t.Fatalf("error %v, want ErrChecksum", err)
	}
}

func TestPushRenewsExpiringUploads(t *testing.T) {
	f, cl, _ := newStorage(t, 8)
	f.expires = time.Now().Add(time.Minute) // inside the margin: renewed before the first part
	if _, err := cl.Push(context.Background(), strings.NewReader("hello"), 5, client.ArtifactCreate{Name: "h"}, client.PushOptions{PartSize: 8}); err != nil {
		t.Fatal(err)
	}
	if f.renewals != 1 {
		t.Fatalf("%d renewals", f.renewals)
	}
}

func TestStorageRefusalIsATransferError(t *testing.T) {
	f, cl, _ := newStorage(t, 8)
	f.created = client.ArtifactCreate{Size: 5, SHA256: strings.Repeat("0", 64)}
	up := f.upload()["parts"].([]map[string]any)[0]
	part := client.UploadPart{PartNumber: 1, Size: 5, URL: up["url"].(string), Headers: up["headers"].(map[string]string)}
	_, err := cl.UploadPart(context.Background(), part, strings.NewReader("hello"), nil)
	var te *client.TransferError
	if !errors.As(err, &te) || te.Status != 400 || te.Code != "BadDigest" || te.RequestID != "s3-req-1" {
		t.Fatalf("error %#v", err)
	}
	if strings.Contains(err.Error(), "Signature") {
		t.Fatalf("the presigned URL leaked into the message: %v", err)
	}
	if _, ok := client.AsError(err); ok {
		t.Fatal("a storage refusal reads as an API error")
	}
}

func TestDigests(t *testing.T) {
	var done []int64
	whole, parts, err := client.Digests(strings.NewReader("abcdefghij"), 10, 4, func(d, total int64) {
		if total != 10 {
			t.Errorf("total %d", total)
		}
		done = append(done, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) == 0 || done[len(done)-1] != 10 {
		t.Fatalf("digest progress %v", done)
	}
	hexOf := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	if whole != hexOf("abcdefghij") || len(parts) != 3 || parts[0] != hexOf("abcd") || parts[2] != hexOf("ij") {
		t.Fatalf("%s %v", whole, parts)
	}
}
