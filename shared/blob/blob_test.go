package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// send performs a presigned request with plain net/http: no SDK, no credentials.
func send(t *testing.T, p blob.Presigned, body []byte) (int, []byte, http.Header) {
	t.Helper()
	var rdr io.Reader
	if body != nil {
		rdr = bytes.NewReader(body)
	}
	req, err := http.NewRequest(p.Method, p.URL, rdr)
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
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out, res.Header
}

func newStore(t *testing.T) (*devstack.S3, *blob.Store) {
	s3srv := devstack.NewTestS3(t)
	return s3srv, blob.New(blob.Options{Client: s3srv.Client(context.Background()), Bucket: s3srv.Bucket})
}

func TestSinglePutIsVerifiedByS3(t *testing.T) {
	_, st := newStore(t)
	ctx := context.Background()
	data := []byte("hello, artifact\n")
	key := blob.Key("acme", "art_1")
	p, err := st.PresignPut(ctx, key, hexSum(data), "text/plain", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"x-amz-checksum-sha256", "x-amz-server-side-encryption"} {
		if p.Headers[h] == "" {
			t.Fatalf("presigned put does not sign %s: %v", h, p.Headers)
		}
	}
	// Other bytes under the same URL are refused by S3 itself.
	if code, body, _ := send(t, p, []byte("hello, artifacT\n")); code != http.StatusBadRequest {
		t.Fatalf("wrong bytes: %d %s", code, body)
	}
	if _, err := st.Head(ctx, key); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("after refused upload: %v", err)
	}
	// Leaving out a signed header is refused too.
	noSum := p
	noSum.Headers = map[string]string{"content-type": "text/plain"}
	if code, _, _ := send(t, noSum, data); code != http.StatusForbidden {
		t.Fatalf("upload without the signed checksum header: %d", code)
	}
	if code, body, _ := send(t, p, data); code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, body)
	}
	obj, err := st.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := blob.HexToBase64(hexSum(data))
	if obj.Size != int64(len(data)) || obj.SHA256 != want || obj.ChecksumType != "FULL_OBJECT" {
		t.Fatalf("head %+v, want sha %s", obj, want)
	}
	t.Logf("versitygw single PUT: checksum type %q, encryption reported %q", obj.ChecksumType, obj.Encryption)
}

func TestMultipartHasCompositeSHA256(t *testing.T) {
	_, st := newStore(t)
	ctx := context.Background()
	key := blob.Key("acme", "art_mp")
	parts := [][]byte{bytes.Repeat([]byte("a"), blob.MinPartSize), []byte("tail")}
	id, err := st.CreateMultipart(ctx, key, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	var sums []string
	for i, b := range parts {
		sums = append(sums, hexSum(b))
		p, err := st.PresignPart(ctx, key, id, int32(i+1), hexSum(b), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Headers["x-amz-server-side-encryption"]; ok {
			t.Fatalf("part carries an SSE header: %v", p.Headers)
		}
		if code, body, _ := send(t, p, b); code != http.StatusOK {
			t.Fatalf("part %d: %d %s", i+1, code, body)
		}
	}
	listed, err := st.ListParts(ctx, key, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 {
		t.Fatalf("parts %+v", listed)
	}
	for i, p := range listed {
		want, _ := blob.HexToBase64(sums[i])
		if p.SHA256 != want || p.Size != int64(len(parts[i])) {
			t.Fatalf("part %d listed as %+v, want sha %s", i+1, p, want)
		}
	}
	if err := st.CompleteMultipart(ctx, key, id, listed); err != nil {
		t.Fatal(err)
	}
	obj, err := st.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := blob.CompositeSHA256(sums)
	if obj.SHA256 != want || obj.ChecksumType != "COMPOSITE" || obj.Size != int64(blob.MinPartSize+4) {
		t.Fatalf("head %+v, want composite %s", obj, want)
	}
	// A repeated complete either succeeds again (versitygw v1.8.0 does, and AWS
	// does for a while) or reports the upload gone; callers handle both.
	if err := st.CompleteMultipart(ctx, key, id, listed); err != nil && !errors.Is(err, blob.ErrNoSuchUpload) {
		t.Fatalf("second complete: %v", err)
	}
}

func TestLinkSignedWithSecretCredentials(t *testing.T) {
	srv := devstack.NewTestS3(t)
	ctx := context.Background()
	// The process's own client signs with keys S3 does not know; only the
	// secret's (the gateway's root key, static credentials) are valid. So a
	// link that downloads proves it was signed with the secret's key.
	client := s3.NewFromConfig(aws.Config{Region: devstack.Region, Credentials: aws.AnonymousCredentials{}}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(srv.Endpoint)
		o.UsePathStyle = true
	})
	var fetches atomic.Int32
	cfg := blob.SignerConfig{SecretARN: "arn:aws:secretsmanager:us-east-1:123456789012:secret:signer", Fetch: func(_ context.Context, arn string) (string, error) {
		fetches.Add(1)
		if arn != "arn:aws:secretsmanager:us-east-1:123456789012:secret:signer" {
			return "", fmt.Errorf("wrong arn %s", arn)
		}
		return fmt.Sprintf(`{"accessKeyId":%q,"secretAccessKey":%q}`, srv.AccessKey, srv.SecretKey), nil
	}}
	st := blob.New(blob.Options{Client: client, Bucket: srv.Bucket, LinkCredentials: cfg.LinkCredentials()})
	data := []byte("downloadable bytes")
	key := blob.Key("acme", "art_link")
	if _, err := srv.Client(ctx).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		link, err := st.PresignGet(ctx, key, "out.txt", "text/plain", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		code, body, h := send(t, link, nil)
		if code != http.StatusOK || !bytes.Equal(body, data) {
			t.Fatalf("download: %d %q", code, body)
		}
		if !strings.Contains(h.Get("Content-Disposition"), "out.txt") {
			t.Errorf("content-disposition %q", h.Get("Content-Disposition"))
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("secret read %d times, want once", n)
	}
}

func TestSecretFailureIsRetriedNotCached(t *testing.T) {
	var calls atomic.Int32
	cfg := blob.SignerConfig{SecretARN: "arn:x", Fetch: func(context.Context, string) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("throttled")
		}
		return `{"accessKeyId":"AKIDEXAMPLE","secretAccessKey":"s3cr3t"}`, nil
	}}
	creds := cfg.LinkCredentials()
	if _, err := creds.Retrieve(context.Background()); err == nil {
		t.Fatal("first read should fail")
	}
	c, err := creds.Retrieve(context.Background())
	if err != nil || c.AccessKeyID != "AKIDEXAMPLE" {
		t.Fatalf("second read: %v %v", c, err)
	}
	bad := blob.SignerConfig{SecretARN: "arn:y", Fetch: func(context.Context, string) (string, error) { return `{"user":"s3cr3t"}`, nil }}
	if _, err := bad.LinkCredentials().Retrieve(context.Background()); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("malformed secret: %v", err)
	}
	if (blob.SignerConfig{}).LinkCredentials() != nil {
		t.Fatal("no secret should mean the process's own credentials")
	}
}

func TestLinkRefusedAfterExpiry(t *testing.T) {
	srv, st := newStore(t)
	ctx := context.Background()
	key := blob.Key("acme", "art_short")
	if _, err := srv.Client(ctx).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(key), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	link, err := st.PresignGet(ctx, key, "", "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := send(t, link, nil); code != http.StatusOK {
		t.Fatalf("fresh link: %d", code)
	}
	// S3 checks real time, so this test really waits.
	time.Sleep(3 * time.Second)
	if code, body, _ := send(t, link, nil); code != http.StatusForbidden {
		t.Fatalf("expired link: %d %s", code, body)
	}
}

func TestUnreachableS3IsUnavailable(t *testing.T) {
	client := s3.NewFromConfig(aws.Config{Region: devstack.Region, Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.UsePathStyle = true
	})
	st := blob.New(blob.Options{Client: client, Bucket: "b"})
	_, err := st.Head(context.Background(), "k")
	if domain.ErrorCode(err) != domain.CodeUnavailable {
		t.Fatalf("got %v", err)
	}
}

// BenchmarkPresignGet is the signing half of a link: local computation only
// (the endpoint below does not exist and is never contacted).
func BenchmarkPresignGet(b *testing.B) {
	client := s3.NewFromConfig(aws.Config{Region: devstack.Region, Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.UsePathStyle = true
	})
	st := blob.New(blob.Options{Client: client, Bucket: "b"})
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if _, err := st.PresignGet(ctx, blob.Key("acme", "art_x"), "out.tar.gz", "application/gzip", time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// The expiry a presigned request reports is the one S3 enforces, X-Amz-Date
// + X-Amz-Expires, never later: X-Amz-Date has whole seconds, so a
// real-clock signing time with a fraction must not be reported as is.
func TestPresignedExpiresIsWhatS3Enforces(t *testing.T) {
	client := s3.NewFromConfig(aws.Config{Region: devstack.Region, Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}, func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.UsePathStyle = true
	})
	st := blob.New(blob.Options{Client: client, Bucket: "b"}) // the real clock
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		link, err := st.PresignGet(ctx, blob.Key("acme", "art_x"), "out", "", 90*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		up, err := st.PresignPut(ctx, blob.Key("acme", "art_x"), hexSum(nil), "application/octet-stream", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			p   blob.Presigned
			ttl time.Duration
		}{{link, 90 * time.Second}, {up, time.Hour}} {
			u, err := url.Parse(c.p.URL)
			if err != nil {
				t.Fatal(err)
			}
			signed, err := time.Parse("20060102T150405Z", u.Query().Get("X-Amz-Date"))
			if err != nil {
				t.Fatal(err)
			}
			if want := signed.Add(c.ttl); !c.p.Expires.Equal(want) {
				t.Fatalf("reported expiry %s, S3 enforces %s (X-Amz-Date %s + %s)", c.p.Expires.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano), u.Query().Get("X-Amz-Date"), u.Query().Get("X-Amz-Expires"))
			}
		}
		time.Sleep(7 * time.Millisecond)
	}
}
