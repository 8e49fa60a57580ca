// Package blob is envlease's object storage: S3 through aws-sdk-go-v2.
//
// The service never carries artifact bytes itself. Clients upload straight to
// S3 with presigned requests, and download through presigned links. Every
// presigned upload signs the SHA-256 the client declared, so S3 refuses bytes
// that do not match before anything is stored, and sealing reads the checksum
// S3 kept instead of downloading the object again.
//
// Objects live under orgs/<org>/artifacts/<id>/, the prefix the IAM policies
// and lifecycle rules of the stack are written for. Every upload requests
// SSE-S3 (AES256), so objects are encrypted at rest even if the bucket's
// default encryption were ever removed.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// SSE is the server-side encryption every upload requests: SSE-S3.
const SSE = types.ServerSideEncryptionAes256

// MinPartSize is S3's smallest part but the last of a multipart upload.
const MinPartSize = 5 << 20

// MaxParts is S3's largest part count of a multipart upload.
const MaxParts = 10000

// Key is the object key of an artifact's data.
func Key(org, id string) string { return Prefix(org, id) + "data" }

// Prefix is where every object of one artifact lives.
func Prefix(org, id string) string { return "orgs/" + org + "/artifacts/" + id + "/" }

// Errors a caller acts on. Any other S3 failure is a domain Unavailable
// error: the client should retry (503 with Retry-After).
var (
	// ErrNotFound: no such object.
	ErrNotFound = errors.New("blob: no such object")
	// ErrNoSuchUpload: the multipart upload is gone (completed or aborted).
	ErrNoSuchUpload = errors.New("blob: no such multipart upload")
	// ErrRejected: S3 refused the request because of what the client sent
	// (a wrong part, a digest that does not match, a part too small).
	ErrRejected = errors.New("blob: rejected by object storage")
)

// Options configure a Store.
type Options struct {
	// Client is the S3 client of the process (its own credentials). It does
	// the server-side calls and signs uploads.
	Client *s3.Client
	Bucket string
	// Clock is the signing time of presigned requests. S3 compares it with
	// real time, so anything but clock.System only suits tests that never
	// send the signed request.
	Clock clock.Clock
	// LinkCredentials sign download links. Nil means the client's own
	// credentials; see Signer for why a deployment sets it.
	LinkCredentials aws.CredentialsProvider
}

// Store reads and writes artifact objects in one bucket.
type Store struct {
	client  *s3.Client
	uploads *s3.PresignClient
	links   *s3.PresignClient
	bucket  string
	clock   clock.Clock
}

// New returns a Store. Building it does no I/O.
func New(o Options) *Store {
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	s := &Store{client: o.Client, bucket: o.Bucket, clock: o.Clock}
	s.uploads = s3.NewPresignClient(o.Client, func(po *s3.PresignOptions) {
		po.Presigner = clockPresigner{signer: newV4(), clock: o.Clock}
	})
	s.links = s3.NewPresignClient(o.Client, func(po *s3.PresignOptions) {
		po.Presigner = clockPresigner{signer: newV4(), clock: o.Clock}
		if o.LinkCredentials != nil {
			po.ClientOptions = append(po.ClientOptions, func(so *s3.Options) { so.Credentials = o.LinkCredentials })
		}
	})
	return s
}

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// newV4 is the signer S3 itself uses: S3 keys are not path-escaped twice.
func newV4() *v4.Signer {
	return v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true })
}

// clockPresigner signs at the Store's clock; the expiry a presigned request
// reports is then read back from its X-Amz-Date + X-Amz-Expires (expiryOf).
type clockPresigner struct {
	signer *v4.Signer
	clock  clock.Clock
}

func (p clockPresigner) PresignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return p.signer.PresignHTTP(ctx, creds, r, payloadHash, service, region, p.clock.Now(), optFns...)
}

// Presigned is a request a client sends as is: Method to URL with Headers.
// Every header is part of the signature; leaving one out or changing it
// makes S3 refuse the request.
type Presigned struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Expires time.Time         `json:"expires"`
}

// HexToBase64 turns a hex SHA-256 into the base64 form S3's checksum headers use.
func HexToBase64(hexSum string) (string, error) {
	b, err := hex.DecodeString(hexSum)
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("not a hex SHA-256")
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// CompositeSHA256 is the checksum S3 gives a multipart object whose parts were
// uploaded with SHA-256: base64(SHA-256(part digests concatenated)) + "-" + count.
func CompositeSHA256(partHex []string) (string, error) {
	h := sha256.New()
	for _, p := range partHex {
		b, err := hex.DecodeString(p)
		if err != nil || len(b) != sha256.Size {
			return "", fmt.Errorf("part checksum %q is not a hex SHA-256", p)
		}
		h.Write(b)
	}
	return fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(h.Sum(nil)), len(partHex)), nil
}

// PresignPut signs a single-request upload of key. S3 verifies the body
// against sha256Hex and refuses it when it does not match.
func (s *Store) PresignPut(ctx context.Context, key, sha256Hex, contentType string, ttl time.Duration) (Presigned, error) {
	sum, err := HexToBase64(sha256Hex)
	if err != nil {
		return Presigned{}, domain.Internal(err)
	}
	req, err := s.uploads.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket:               aws.String(s.bucket),
		Key:                  aws.String(key),
		ChecksumSHA256:       aws.String(sum),
		ContentType:          aws.String(contentType),
		ServerSideEncryption: SSE,
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return Presigned{}, signError("presign put", err)
	}
	return s.presigned(req.Method, req.URL, req.SignedHeader, ttl), nil
}

// CreateMultipart starts a multipart upload whose parts each carry a SHA-256,
// so the finished object has S3's composite SHA-256 checksum.
func (s *Store) CreateMultipart(ctx context.Context, key, contentType string) (string, error) {
	out, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:               aws.String(s.bucket),
		Key:                  aws.String(key),
		ContentType:          aws.String(contentType),
		ChecksumAlgorithm:    types.ChecksumAlgorithmSha256,
		ChecksumType:         types.ChecksumTypeComposite,
		ServerSideEncryption: SSE,
	})
	if err != nil {
		return "", mapError("create multipart upload", err)
	}
	return aws.ToString(out.UploadId), nil
}

// PresignPart signs the upload of one part. Encryption was requested when
// the upload was created; S3 refuses SSE-S3 headers on parts.
func (s *Store) PresignPart(ctx context.Context, key, uploadID string, part int32, sha256Hex string, ttl time.Duration) (Presigned, error) {
	sum, err := HexToBase64(sha256Hex)
	if err != nil {
		return Presigned{}, domain.Internal(err)
	}
	req, err := s.uploads.PresignUploadPart(ctx, &s3.UploadPartInput{
		Bucket:         aws.String(s.bucket),
		Key:            aws.String(key),
		UploadId:       aws.String(uploadID),
		PartNumber:     aws.Int32(part),
		ChecksumSHA256: aws.String(sum),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return Presigned{}, signError("presign part", err)
	}
	return s.presigned(req.Method, req.URL, req.SignedHeader, ttl), nil
}

// Part is one uploaded part.
type Part struct {
	Number int32
	ETag   string
	// SHA256 is S3's base64 checksum of the part ("" if S3 kept none).
	SHA256 string
	Size   int64
}

// ListParts returns the parts uploaded so far, in part-number order.
func (s *Store) ListParts(ctx context.Context, key, uploadID string) ([]Part, error) {
	var out []Part
	p := s3.NewListPartsPaginator(s.client, &s3.ListPartsInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, mapError("list parts", err)
		}
		for _, pt := range page.Parts {
			out = append(out, Part{
				Number: aws.ToInt32(pt.PartNumber), ETag: aws.ToString(pt.ETag),
				SHA256: aws.ToString(pt.ChecksumSHA256), Size: aws.ToInt64(pt.Size),
			})
		}
	}
	return out, nil
}

// CompleteMultipart assembles the object from parts. Each part carries the
// SHA-256 the client declared, which S3 compares with what it stored.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) error {
	cps := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cps[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag), ChecksumSHA256: aws.String(p.SHA256)}
	}
	_, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cps},
	})
	return mapError("complete multipart upload", err)
}

// AbortMultipart drops an unfinished upload and its parts. An upload that is
// already gone is not an error.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
	})
	if err = mapError("abort multipart upload", err); errors.Is(err, ErrNoSuchUpload) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Object is what S3 knows about a stored object.
type Object struct {
	Size int64
	// SHA256 is S3's base64 checksum: the object's digest for a single PUT
	// (type FULL_OBJECT), "<digest of part digests>-<parts>" for multipart
	// (type COMPOSITE). Empty when S3 kept no SHA-256.
	SHA256       string
	ChecksumType string
	// Encryption is what S3 reports; "" where the store does not say
	// (versitygw reports nothing).
	Encryption string
}

// Head reads an object's size and checksums without its bytes.
func (s *Store) Head(ctx context.Context, key string) (Object, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		return Object{}, mapError("head object", err)
	}
	return Object{
		Size: aws.ToInt64(out.ContentLength), SHA256: aws.ToString(out.ChecksumSHA256),
		ChecksumType: string(out.ChecksumType), Encryption: string(out.ServerSideEncryption),
	}, nil
}

// Delete removes an object. A missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err = mapError("delete object", err); errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// PresignGet signs a download link with the link credentials. It is local
// computation: no request leaves the process (the credentials are cached).
// filename, when set, becomes the download's Content-Disposition.
func (s *Store) PresignGet(ctx context.Context, key, filename, contentType string, ttl time.Duration) (Presigned, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}
	if filename != "" {
		in.ResponseContentDisposition = aws.String(mime.FormatMediaType("attachment", map[string]string{"filename": filename}))
	}
	if contentType != "" {
		in.ResponseContentType = aws.String(contentType)
	}
	req, err := s.links.PresignGetObject(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return Presigned{}, signError("presign get", err)
	}
	return s.presigned(req.Method, req.URL, req.SignedHeader, ttl), nil
}

// signError maps a presigning failure. The only I/O a presign does is
// fetching the signing credentials (the instance role, the signer secret), so
// a failure is a dependency the client may retry.
func signError(op string, err error) error {
	return domain.Unavailable("the request signer", fmt.Errorf("%s: %w", op, err))
}

func (s *Store) presigned(method, rawURL string, h http.Header, ttl time.Duration) Presigned {
	headers := map[string]string{}
	for k, vs := range h {
		// Host is set by every HTTP client from the URL.
		if strings.EqualFold(k, "Host") || len(vs) == 0 {
			continue
		}
		headers[strings.ToLower(k)] = vs[0]
	}
	return Presigned{Method: method, URL: rawURL, Headers: headers, Expires: s.expiryOf(rawURL, ttl)}
}

// expiryOf is when S3 stops accepting a presigned request: its X-Amz-Date
// (whole seconds) plus X-Amz-Expires. The signing time's fraction of a second
// is not part of it, so now + ttl would report up to a second too late.
func (s *Store) expiryOf(rawURL string, ttl time.Duration) time.Time {
	if u, err := url.Parse(rawURL); err == nil {
		q := u.Query()
		signed, err1 := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
		secs, err2 := strconv.ParseInt(q.Get("X-Amz-Expires"), 10, 64)
		if err1 == nil && err2 == nil {
			return signed.Add(time.Duration(secs) * time.Second).UTC()
		}
	}
	return s.clock.Now().Truncate(time.Second).Add(ttl).UTC()
}

// mapError turns an S3 error into ErrNotFound, ErrNoSuchUpload, ErrRejected or
// a domain Unavailable error. The SDK has retried by the time it gets here.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var nsu *types.NoSuchUpload
	switch {
	case errors.As(err, &nsk), errors.As(err, &nf):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case errors.As(err, &nsu):
		return fmt.Errorf("%s: %w", op, ErrNoSuchUpload)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%s: %w", op, ErrNotFound)
		case "NoSuchUpload":
			return fmt.Errorf("%s: %w", op, ErrNoSuchUpload)
		case "InvalidPart", "InvalidPartOrder", "BadDigest", "EntityTooSmall", "InvalidDigest", "XAmzContentChecksumMismatch":
			return fmt.Errorf("%s: %w: %s", op, ErrRejected, api.ErrorCode())
		}
	}
	return domain.Unavailable("object storage", fmt.Errorf("%s: %w", op, err))
}
