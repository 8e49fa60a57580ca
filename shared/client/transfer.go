package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// DefaultPartSize is the API's multipart part size: a file up to it goes up
// in one PUT, a larger one in parts of it, whose digests the create request
// must list, so the client has to know it before asking.
const DefaultPartSize = 64 << 20

// renewMargin is how long before the presigned uploads expire a part is no
// longer started on them: a part of 64 MiB on a slow link takes minutes.
const renewMargin = 5 * time.Minute

// ArtifactCreate is the body of POST /v1/artifacts.
type ArtifactCreate struct {
	// Name is the download's file name, at most 255 characters.
	Name string `json:"name"`
	// Project is a free reference to group artifacts by.
	Project string `json:"project,omitempty"`
	// ContentType is the bytes' media type (default
	// application/octet-stream), served with downloads.
	ContentType string `json:"contentType,omitempty"`
	// Labels are at most 32 key-value pairs, kept with the artifact.
	Labels map[string]string `json:"labels,omitempty"`
	// Size is the file's size in bytes, at most 64 GiB.
	Size int64 `json:"size"`
	// SHA256 is the hex digest of the whole file.
	SHA256 string `json:"sha256"`
	// Expires is a duration from now ("24h") or an RFC 3339 time: at
	// least a minute, at most 90 days (default 7 days).
	Expires string `json:"expires,omitempty"`
	// Parts are the hex digests of every part, for a file larger than the
	// part size (and only then).
	Parts []string `json:"parts,omitempty"`
}

type (
	// UploadPart is one presigned request of an upload: bytes [Offset,
	// Offset+Size) of the file, sent to URL with exactly Headers.
	UploadPart = domain.UploadPart
	// Upload is the presigned upload of an open artifact, as the API hands
	// it out: its parts, and when their URLs expire.
	Upload = domain.Upload
)

// ArtifactUpload is an open artifact and its presigned upload.
type ArtifactUpload struct {
	// Artifact is the open artifact's record.
	Artifact domain.Artifact `json:"artifact"`
	// Upload is where and how to send its bytes.
	Upload Upload `json:"upload"`
}

// CompletedPart is an uploaded part as object storage answered it.
type CompletedPart struct {
	// PartNumber is the UploadPart's PartNumber.
	PartNumber int `json:"partNumber"`
	// ETag is the ETag header object storage answered the part with.
	ETag string `json:"etag"`
}

// Progress is told how many bytes of a transfer are done out of total
// (total is -1 when unknown). done goes back when a part is sent again.
type Progress func(done, total int64)

// CreateArtifact records an open artifact and presigns its upload. It is
// never retried: a lost answer leaves an open artifact nobody uploads to,
// which simply expires.
func (c *Client) CreateArtifact(ctx context.Context, r ArtifactCreate) (ArtifactUpload, error) {
	var out ArtifactUpload
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/artifacts", body: r}, &out)
	return out, err
}

// RenewUpload presigns an open artifact's upload again (nothing is stored,
// so it is retried).
func (c *Client) RenewUpload(ctx context.Context, id string) (ArtifactUpload, error) {
	var out ArtifactUpload
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/artifacts/" + seg(id) + "/upload", retry: true}, &out)
	return out, err
}

// CompleteArtifact verifies the uploaded bytes and seals the artifact. parts
// may be nil: the service then lists the uploaded parts itself.
func (c *Client) CompleteArtifact(ctx context.Context, id string, parts []CompletedPart) (domain.Artifact, error) {
	var body any
	if len(parts) > 0 {
		body = map[string]any{"parts": parts}
	}
	var out domain.Artifact
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/artifacts/" + seg(id) + "/complete", body: body}, &out)
	return out, err
}

// TransferError is a presigned request that object storage refused.
type TransferError struct {
	// Method is the request's method (PUT, GET).
	Method string
	// Host is the storage's host; the URL itself is a credential.
	Host string
	// Status is the HTTP status object storage answered.
	Status int
	// Code is object storage's error code (from S3's XML error body), such
	// as SlowDown; empty when it sent none.
	Code string
	// Message is object storage's error message, if it sent one.
	Message string
	// RequestID is object storage's request id, for its logs.
	RequestID string
}

// Error says what was refused, where, and why, without the URL.
func (e *TransferError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	s := fmt.Sprintf("object storage refused %s at %s: %s (%d", e.Method, e.Host, msg, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.RequestID != "" {
		s += ", request " + e.RequestID
	}
	return s + ")"
}

// ErrChecksum is a download whose bytes are not the artifact's.
var ErrChecksum = errors.New("checksum mismatch")

// UploadPart sends one part with exactly the headers the API signed. The
// part is read from src at its offset, so a part that object storage answers
// with 500, 502 or 503, or whose connection breaks, is sent again (a part
// sent twice replaces the first). progress, when set, is told the bytes of
// this part sent so far. It returns the ETag object storage answered.
func (c *Client) UploadPart(ctx context.Context, p UploadPart, src io.ReaderAt, progress func(done int64)) (string, error) {
	method := p.Method
	if method == "" {
		method = http.MethodPut
	}
	var etag string
	err := c.transfer(ctx, func() (bool, error) {
		body := &countingReader{r: io.NewSectionReader(src, p.Offset, p.Size), report: progress}
		req, err := http.NewRequestWithContext(ctx, method, p.URL, body)
		if err != nil {
			return false, err
		}
		req.ContentLength = p.Size
		if p.Size == 0 {
			// Without this net/http sends no Content-Length for an empty
			// body, and a signed PUT of zero bytes needs it.
			req.Body = http.NoBody
		}
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("User-Agent", c.userAgent)
		res, err := c.http.Do(req)
		if err != nil {
			return ctx.Err() == nil, err
		}
		if res.StatusCode/100 != 2 {
			return retryableStorage(res.StatusCode), storageError(method, req.URL, res)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxErrorBody))
		res.Body.Close()
		etag = res.Header.Get("ETag")
		return false, nil
	})
	return etag, err
}

// Download GETs a presigned URL (no token is sent) into w and returns the
// number of bytes written. A refusal or a connection that fails before any
// byte arrived is retried; once bytes were written it is not, since w
// cannot take them back.
func (c *Client) Download(ctx context.Context, rawURL string, w io.Writer, progress Progress) (int64, error) {
	var n int64
	err := c.transfer(ctx, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("User-Agent", c.userAgent)
		res, err := c.http.Do(req)
		if err != nil {
			return ctx.Err() == nil, err
		}
		if res.StatusCode != http.StatusOK {
			return retryableStorage(res.StatusCode), storageError(http.MethodGet, req.URL, res)
		}
		defer res.Body.Close()
		total := res.ContentLength
		var report func(int64)
		if progress != nil {
			progress(0, total)
			report = func(done int64) { progress(done, total) }
		}
		n, err = io.Copy(w, &countingReader{r: res.Body, report: report})
		if err != nil {
			return false, fmt.Errorf("download from %s: %w", req.URL.Host, err)
		}
		if total >= 0 && n != total {
			return false, fmt.Errorf("download from %s: got %d of %d bytes", req.URL.Host, n, total)
		}
		return false, nil
	})
	return n, err
}

// transfer runs one presigned request until it succeeds, fails for good, or
// maxAttempts are spent, with the same doubling backoff as API calls.
func (c *Client) transfer(ctx context.Context, attempt func() (retry bool, err error)) error {
	for n := 1; ; n++ {
		retry, err := attempt()
		if err == nil || !retry || n >= c.maxAttempts {
			return err
		}
		if serr := c.sleep(ctx, time.Duration(1<<(n-1))*time.Second); serr != nil {
			return fmt.Errorf("%w (while waiting to retry after: %v)", serr, err)
		}
	}
}

// retryableStorage: S3 asks clients to retry its 500 and 503, and a gateway
// in front of it answers 502 for a failure on its way.
func retryableStorage(status int) bool {
	return status == http.StatusInternalServerError || status == http.StatusBadGateway || status == http.StatusServiceUnavailable
}

func storageError(method string, u *url.URL, res *http.Response) *TransferError {
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	e := &TransferError{Method: method, Host: u.Host, Status: res.StatusCode, RequestID: res.Header.Get("X-Amz-Request-Id")}
	var body struct {
		Code      string `xml:"Code"`
		Message   string `xml:"Message"`
		RequestID string `xml:"RequestId"`
	}
	if xml.Unmarshal(raw, &body) == nil {
		e.Code, e.Message = body.Code, body.Message
		if e.RequestID == "" {
			e.RequestID = body.RequestID
		}
	}
	return e
}

type countingReader struct {
	r      io.Reader
	done   int64
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.done += int64(n)
	if c.report != nil && n > 0 {
		c.report(c.done)
	}
	return n, err
}

// PushOptions tune Push.
type PushOptions struct {
	// PartSize is the service's part size (DefaultPartSize when zero).
	PartSize int64
	// DigestProgress is told how much of the file is digested, before
	// anything is sent (a large file takes a while).
	DigestProgress Progress
	// Progress is told how much of the file is uploaded.
	Progress Progress
}

// Push uploads size bytes of src as a new artifact: it digests the file (and
// its parts when it is larger than the part size), creates the artifact,
// sends every part to its presigned URL, renewing the URLs when they are
// about to expire, and completes it. r's Size, SHA256 and Parts are filled
// in; the rest (Name, Expires, …) is the caller's.
func (c *Client) Push(ctx context.Context, src io.ReaderAt, size int64, r ArtifactCreate, o PushOptions) (domain.Artifact, error) {
	partSize := o.PartSize
	if partSize <= 0 {
		partSize = DefaultPartSize
	}
	whole, parts, err := Digests(src, size, partSize, o.DigestProgress)
	if err != nil {
		return domain.Artifact{}, err
	}
	r.Size, r.SHA256, r.Parts = size, whole, nil
	if size > partSize {
		r.Parts = parts
	}
	created, err := c.CreateArtifact(ctx, r)
	if err != nil {
		return domain.Artifact{}, err
	}
	id, up := created.Artifact.ID, created.Upload
	var done int64
	if o.Progress != nil {
		o.Progress(0, size)
	}
	completed := make([]CompletedPart, 0, len(up.Parts))
	for i := range up.Parts {
		if time.Until(up.Expires) < renewMargin {
			renewed, err := c.RenewUpload(ctx, id)
			if err != nil {
				return created.Artifact, fmt.Errorf("artifact %s: renew upload: %w", id, err)
			}
			if len(renewed.Upload.Parts) != len(up.Parts) {
				return created.Artifact, fmt.Errorf("artifact %s: renewed upload has %d parts, not %d", id, len(renewed.Upload.Parts), len(up.Parts))
			}
			up = renewed.Upload
		}
		p := up.Parts[i]
		var report func(int64)
		if o.Progress != nil {
			base := done
			report = func(n int64) { o.Progress(base+n, size) }
		}
		etag, err := c.UploadPart(ctx, p, src, report)
		if err != nil {
			return created.Artifact, fmt.Errorf("artifact %s: upload part %d: %w", id, p.PartNumber, err)
		}
		done += p.Size
		completed = append(completed, CompletedPart{PartNumber: p.PartNumber, ETag: etag})
	}
	var send []CompletedPart
	if up.Multipart && allTagged(completed) {
		send = completed
	}
	a, err := c.CompleteArtifact(ctx, id, send)
	if err != nil {
		return created.Artifact, fmt.Errorf("artifact %s: complete: %w", id, err)
	}
	return a, nil
}

func allTagged(parts []CompletedPart) bool {
	for _, p := range parts {
		if p.ETag == "" {
			return false
		}
	}
	return true
}

// Digests reads size bytes of src once and returns the hex SHA-256 of the
// whole and of every partSize part. progress, when set, is told the bytes
// read so far.
func Digests(src io.ReaderAt, size, partSize int64, progress Progress) (whole string, parts []string, err error) {
	all := sha256.New()
	for off := int64(0); off < size || (size == 0 && off == 0); off += partSize {
		n := min(partSize, size-off)
		part := sha256.New()
		var report func(int64)
		if progress != nil {
			base := off
			report = func(done int64) { progress(base+done, size) }
		}
		if _, err := io.Copy(io.MultiWriter(all, part), &countingReader{r: io.NewSectionReader(src, off, n), report: report}); err != nil {
			return "", nil, fmt.Errorf("read: %w", err)
		}
		parts = append(parts, hex.EncodeToString(part.Sum(nil)))
		if size == 0 {
			break
		}
	}
	return hex.EncodeToString(all.Sum(nil)), parts, nil
}

// PullOptions tune Pull.
type PullOptions struct {
	// LinkExpires is how long the download link lives (default: the
	// service's, 1 hour).
	LinkExpires string
	// Progress is told how much is downloaded.
	Progress Progress
}

// Pull downloads a sealed artifact into w through a fresh signed link and
// checks its size and SHA-256 against the artifact's record; a mismatch is
// ErrChecksum (w then holds bytes that must not be used).
func (c *Client) Pull(ctx context.Context, id string, w io.Writer, o PullOptions) (domain.Artifact, error) {
	a, err := c.GetArtifact(ctx, id)
	if err != nil {
		return a, err
	}
	link, err := c.CreateLink(ctx, id, o.LinkExpires)
	if err != nil {
		return a, err
	}
	h := sha256.New()
	n, err := c.Download(ctx, link.URL, io.MultiWriter(w, h), o.Progress)
	if err != nil {
		return a, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != a.Size || !strings.EqualFold(got, a.SHA256) {
		return a, fmt.Errorf("artifact %s: %w: got %d bytes with SHA-256 %s, want %d bytes with %s", id, ErrChecksum, n, got, a.Size, a.SHA256)
	}
	return a, nil
}
