// Package artifacts holds the rules of artifacts: sealed, expiring files of an
// organization, and the signed links that download them.
//
// Flow: create (the record, open, plus presigned uploads) -> the client PUTs
// the bytes straight to S3 (upload presigns the same requests again when the
// first ones expire before the client is done) -> complete (S3's checksums
// are checked against what was declared, then the record is sealed) -> list,
// read, link. The service never carries artifact bytes; S3 verifies them on
// the way in. The record keeps when its latest upload requests stop working
// (UploadUntil): an artifact never sealed is due for the expiry job (shared/
// expiry) from then on, so abandoned and failed uploads leave no bytes behind.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Store is what the service needs from persistence.
type Store interface {
	PutArtifact(ctx context.Context, a domain.Artifact) error
	GetArtifact(ctx context.Context, org, id string) (domain.Artifact, error)
	SealArtifact(ctx context.Context, a domain.Artifact) error
	FailArtifact(ctx context.Context, a domain.Artifact) error
	RenewArtifactUpload(ctx context.Context, a domain.Artifact, until time.Time) error
	ListArtifacts(ctx context.Context, org string, now time.Time, limit int, cursor string) ([]domain.Artifact, string, error)
}

// Blobs is what the service needs from object storage (blob.Store).
type Blobs interface {
	PresignPut(ctx context.Context, key, sha256Hex, contentType string, ttl time.Duration) (blob.Presigned, error)
	CreateMultipart(ctx context.Context, key, contentType string) (string, error)
	PresignPart(ctx context.Context, key, uploadID string, part int32, sha256Hex string, ttl time.Duration) (blob.Presigned, error)
	ListParts(ctx context.Context, key, uploadID string) ([]blob.Part, error)
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []blob.Part) error
	AbortMultipart(ctx context.Context, key, uploadID string) error
	Head(ctx context.Context, key string) (blob.Object, error)
	Delete(ctx context.Context, key string) error
	PresignGet(ctx context.Context, key, filename, contentType string, ttl time.Duration) (blob.Presigned, error)
}

// Limits and defaults. They are documented in docs/api.md (Artifacts).
const (
	// DefaultPartSize is the part size of multipart uploads; files up to it
	// go up in one PUT.
	DefaultPartSize = 64 << 20
	// MaxSize is the largest artifact: 1024 parts of 64 MiB.
	MaxSize = 64 << 30
	// DefaultExpiry and MaxExpiry bound an artifact's life.
	DefaultExpiry = 7 * 24 * time.Hour
	MaxExpiry     = 90 * 24 * time.Hour
	// MinExpiry leaves time to upload and seal: upload URLs never outlive the
	// artifact, and one that ends within seconds is of no use to anyone.
	MinExpiry = time.Minute
	// UploadWindow is how long presigned uploads are valid. They are signed
	// with the function's own (session) credentials, which last about this
	// long at least. An artifact not completed by the end of its window can
	// no longer be (until its upload is renewed), and the expiry job removes
	// it domain.ArtifactUploadGrace later.
	UploadWindow = time.Hour
	// MaxLinkExpiry caps a link's life: SigV4 allows no longer, and the
	// signing key must outlive it.
	MaxLinkExpiry = 7 * 24 * time.Hour
	// DefaultLinkExpiry applies when a link request names no expiry.
	DefaultLinkExpiry = time.Hour
	// Listing page sizes.
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// Options tune the service; zero values take the defaults above.
type Options struct {
	// PartSize is the multipart part size (at least blob.MinPartSize).
	// Tests lower it to exercise multipart with small files.
	PartSize int64
}

// Service holds the artifact rules.
type Service struct {
	store    Store
	blobs    Blobs
	clock    clock.Clock
	partSize int64
}

// NewService returns the artifacts service.
func NewService(store Store, blobs Blobs, clk clock.Clock, opts Options) *Service {
	if opts.PartSize < blob.MinPartSize {
		opts.PartSize = DefaultPartSize
	}
	return &Service{store: store, blobs: blobs, clock: clk, partSize: opts.PartSize}
}

// PartSize is the multipart part size in use.
func (s *Service) PartSize() int64 { return s.partSize }

// CreateRequest is the body of POST /v1/artifacts.
type CreateRequest struct {
	Name        string            `json:"name"`
	Project     string            `json:"project,omitempty"`
	ContentType string            `json:"contentType,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Size and SHA256 (hex) describe the whole file; both are required.
	Size   *int64 `json:"size"`
	SHA256 string `json:"sha256"`
	// Expires is a duration from now ("24h") or an RFC 3339 time.
	Expires string `json:"expires,omitempty"`
	// Parts are the hex SHA-256 of each part, in order, for a file larger
	// than the part size (and only then).
	Parts []string `json:"parts,omitempty"`
}

// UploadPart and Upload are the presigned upload of an open artifact.
type (
	UploadPart = domain.UploadPart
	Upload     = domain.Upload
)

// Created is the response to a create.
type Created struct {
	Artifact domain.Artifact `json:"artifact"`
	Upload   Upload          `json:"upload"`
}

// Create records an open artifact and presigns its upload.
func (s *Service) Create(ctx context.Context, p domain.Principal, req CreateRequest) (Created, error) {
	now := s.clock.Now()
	a, err := s.validateCreate(req, now)
	if err != nil {
		return Created{}, err
	}
	a.ID = auth.NewID("art_")
	a.OrgID = p.OrgID
	a.Key = blob.Key(p.OrgID, a.ID)
	a.CreatedBy = p.Actor()
	a.Created = now
	a.State = domain.ArtifactOpen
	a.KeyVersion = domain.ArtifactKeyVersion
	a.Segments = []domain.Segment{}

	if a.Size > s.partSize {
		a.PartSize = s.partSize
		a.Chunks = len(a.PartSHA256)
		if a.UploadID, err = s.blobs.CreateMultipart(ctx, a.Key, a.ContentType); err != nil {
			return Created{}, err
		}
	} else {
		a.Chunks = 1
	}
	up, err := s.presignUpload(ctx, a, uploadWindow(a, now))
	if err != nil {
		return Created{}, err
	}
	a.UploadUntil = up.Expires
	if err := s.store.PutArtifact(ctx, a); err != nil {
		if a.UploadID != "" {
			_ = s.blobs.AbortMultipart(context.WithoutCancel(ctx), a.Key, a.UploadID)
		}
		return Created{}, err
	}
	return Created{Artifact: a, Upload: up}, nil
}

// Upload presigns the upload of an open artifact again, for a client slower
// than UploadWindow (a large multipart upload, a retry after a network
// failure): otherwise it would have to start over with a new artifact. The
// layout is the one declared at create time and, for multipart, the same S3
// upload, so parts already uploaded stay; one sent again replaces the earlier
// (S3 keeps the last). The cost is one DynamoDB read, one conditional update
// (the new window's end, which moves the artifact's cleanup with it) and
// local signing: no request goes to S3.
//
// A window that has already ended can be renewed too, as long as the expiry
// job has not failed the artifact yet: renewing is how a client keeps an
// upload it was too slow for.
func (s *Service) Upload(ctx context.Context, p domain.Principal, id string) (Created, error) {
	a, err := s.store.GetArtifact(ctx, p.OrgID, id)
	if err != nil {
		return Created{}, err
	}
	now := s.clock.Now()
	// Expiry first, as for reads and links: an expired artifact is gone
	// whatever state it had. Sealed and failed are 409 as for complete: the
	// record is still there, but nothing can be uploaded to it any more.
	switch {
	case a.ExpiredAt(now):
		return Created{}, gone()
	case a.State == domain.ArtifactSealed:
		return Created{}, domain.Errorf(domain.CodeConflict, "the artifact is already sealed; a sealed artifact cannot change")
	case a.State == domain.ArtifactFailed:
		return Created{}, failedConflict()
	}
	window := uploadWindow(a, now)
	if window < time.Second {
		// Less than SigV4's smallest expiry is left; a zero expiry would
		// make the SDK sign for its 15-minute default instead.
		return Created{}, gone()
	}
	up, err := s.presignUpload(ctx, a, window)
	if err != nil {
		return Created{}, err
	}
	// Recorded before the URLs are handed out, so the expiry job never
	// cleans while requests it does not know of can still write.
	err = s.store.RenewArtifactUpload(ctx, a, up.Expires)
	if domain.ErrorCode(err) == domain.CodeConflict {
		err = s.renewRefused(ctx, a, up.Expires)
	}
	if err != nil {
		return Created{}, err
	}
	if up.Expires.After(a.UploadUntil) {
		a.UploadUntil = up.Expires
	}
	return Created{Artifact: a, Upload: up}, nil
}

// renewRefused reads the record again after a refused renewal to answer as a
// renewal of what it found would have: the artifact was sealed, failed or
// expired meanwhile, or a concurrent renewal recorded a later window, which
// covers this one's requests too.
func (s *Service) renewRefused(ctx context.Context, read domain.Artifact, until time.Time) error {
	a, err := s.store.GetArtifact(ctx, read.OrgID, read.ID)
	if err != nil {
		return err
	}
	switch {
	case a.ExpiredAt(s.clock.Now()):
		return gone()
	case a.State == domain.ArtifactSealed:
		return domain.Errorf(domain.CodeConflict, "the artifact is already sealed; a sealed artifact cannot change")
	case a.State == domain.ArtifactFailed:
		return failedConflict()
	case a.State == domain.ArtifactOpen && !a.UploadUntil.Before(until):
		return nil
	}
	return domain.Errorf(domain.CodeConflict, "the artifact changed while its upload was renewed; retry")
}

func failedConflict() error {
	return domain.Errorf(domain.CodeConflict, "the artifact failed (its bytes did not verify, or its upload window ended without a complete); create a new one")
}

// uploadWindow is how long uploads presigned at now stay valid: UploadWindow,
// but never past the artifact's expiry. SigV4 counts whole seconds; rounding
// down keeps the window inside the artifact's life.
func uploadWindow(a domain.Artifact, now time.Time) time.Duration {
	return min(UploadWindow, a.Expires.Sub(now)).Truncate(time.Second)
}

// presignUpload signs the upload requests of an open artifact as its record
// lays them out: one PUT, or one UploadPart per declared part of its
// multipart upload (a.UploadID). Create and Upload share it, so fresh URLs
// are exactly what the first ones were but for the signature. It is local
// signing only; starting the multipart upload is the caller's.
func (s *Service) presignUpload(ctx context.Context, a domain.Artifact, window time.Duration) (Upload, error) {
	if a.UploadID == "" {
		// One PUT. Part 1 of 1, so clients handle both cases with one loop.
		ps, err := s.blobs.PresignPut(ctx, a.Key, a.SHA256, a.ContentType, window)
		if err != nil {
			return Upload{}, err
		}
		return Upload{PartSize: s.partSize, Expires: ps.Expires, Parts: []UploadPart{{
			PartNumber: 1, Size: a.Size, SHA256: a.SHA256, Method: ps.Method, URL: ps.URL, Headers: ps.Headers,
		}}}, nil
	}
	// The record's part size, not the service's: the layout was fixed when
	// the upload was declared.
	up := Upload{Multipart: true, PartSize: a.PartSize}
	for i, sum := range a.PartSHA256 {
		ps, err := s.blobs.PresignPart(ctx, a.Key, a.UploadID, int32(i+1), sum, window)
		if err != nil {
			return Upload{}, err
		}
		off := int64(i) * a.PartSize
		// The latest: signing the parts may cross a second boundary.
		if ps.Expires.After(up.Expires) {
			up.Expires = ps.Expires
		}
		up.Parts = append(up.Parts, UploadPart{
			PartNumber: i + 1, Offset: off, Size: min(a.PartSize, a.Size-off), SHA256: sum,
			Method: ps.Method, URL: ps.URL, Headers: ps.Headers,
		})
	}
	return up, nil
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Service) validateCreate(req CreateRequest, now time.Time) (domain.Artifact, error) {
	if err := checkText("name", req.Name, 1, 255); err != nil {
		return domain.Artifact{}, err
	}
	if err := checkText("project", req.Project, 0, 200); err != nil {
		return domain.Artifact{}, err
	}
	ct := req.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil || len(ct) > 255 {
		return domain.Artifact{}, domain.Invalid("contentType", "contentType must be a media type such as application/gzip")
	}
	if err := domain.ValidateLabels(req.Labels); err != nil {
		return domain.Artifact{}, err
	}
	if req.Size == nil {
		return domain.Artifact{}, domain.Invalid("size", "size (bytes) is required")
	}
	size := *req.Size
	if size < 0 || size > MaxSize {
		return domain.Artifact{}, domain.Invalid("size", "size must be between 0 and %d bytes", int64(MaxSize))
	}
	sum := strings.ToLower(req.SHA256)
	if !hexSHA256.MatchString(sum) {
		return domain.Artifact{}, domain.Invalid("sha256", "sha256 must be the file's SHA-256 in hex (64 characters)")
	}
	expires := now.Add(DefaultExpiry)
	if req.Expires != "" {
		t, err := ParseExpiry(req.Expires, now)
		if err != nil {
			return domain.Artifact{}, err
		}
		if t.Sub(now) > MaxExpiry {
			return domain.Artifact{}, domain.Invalid("expires", "an artifact lives at most %s", domain.Duration(MaxExpiry))
		}
		if t.Sub(now) < MinExpiry {
			return domain.Artifact{}, domain.Invalid("expires", "an artifact lives at least %s", domain.Duration(MinExpiry))
		}
		expires = t
	}
	var parts []string
	if size > s.partSize {
		n := int((size + s.partSize - 1) / s.partSize)
		if len(req.Parts) != n {
			return domain.Artifact{}, domain.Invalid("parts", "a file of %d bytes goes up in %d parts of %d bytes; parts must list the SHA-256 of each (%d given)", size, n, s.partSize, len(req.Parts))
		}
		for i, p := range req.Parts {
			p = strings.ToLower(p)
			if !hexSHA256.MatchString(p) {
				return domain.Artifact{}, domain.Invalid("parts", "parts[%d] must be a hex SHA-256", i)
			}
			parts = append(parts, p)
		}
	} else if len(req.Parts) > 0 {
		return domain.Artifact{}, domain.Invalid("parts", "a file of at most %d bytes goes up in one request; parts must be absent", s.partSize)
	}
	return domain.Artifact{
		Name: req.Name, Project: req.Project, ContentType: ct, Labels: nonNil(req.Labels),
		Size: size, SHA256: sum, Expires: expires.UTC(), PartSHA256: parts,
	}, nil
}

// ParseExpiry reads an expiry: a duration from now ("24h", "90m") or an RFC
// 3339 time. Something that is neither is a bad request (400); a time that is
// not in the future is unacceptable (422).
func ParseExpiry(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return time.Time{}, domain.Invalid("expires", "expires must be in the future")
		}
		return t.UTC(), nil
	}
	d, err := domain.ParseDuration(s)
	if err != nil {
		return time.Time{}, domain.BadRequest("expires", "expires must be a duration such as 24h or an RFC 3339 time")
	}
	if d <= 0 {
		return time.Time{}, domain.Invalid("expires", "expires must be a positive duration")
	}
	return now.Add(d.Std()).UTC(), nil
}

func checkText(field, v string, minLen, maxLen int) error {
	n := utf8.RuneCountInString(v)
	if n < minLen {
		return domain.Invalid(field, "%s is required", field)
	}
	if !utf8.ValidString(v) || n > maxLen || strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return domain.Invalid(field, "%s must be at most %d characters without control characters", field, maxLen)
	}
	return nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// CompletedPart is a part the client uploaded, as S3 answered it.
type CompletedPart struct {
	PartNumber int    `json:"partNumber"`
	ETag       string `json:"etag"`
}

// Complete verifies the uploaded bytes through S3's checksums and seals the
// artifact. parts (multipart only) may be omitted: the service then asks S3
// which parts it has.
func (s *Service) Complete(ctx context.Context, p domain.Principal, id string, parts []CompletedPart) (domain.Artifact, error) {
	a, err := s.store.GetArtifact(ctx, p.OrgID, id)
	if err != nil {
		return domain.Artifact{}, err
	}
	now := s.clock.Now()
	switch {
	case a.State == domain.ArtifactSealed:
		return domain.Artifact{}, domain.Errorf(domain.CodeConflict, "the artifact is already sealed; a sealed artifact cannot change")
	case a.State == domain.ArtifactFailed:
		return domain.Artifact{}, failedConflict()
	case a.ExpiredAt(now):
		return domain.Artifact{}, gone()
	case !now.Before(a.UploadEnd()):
		// Past the window the expiry job will remove the artifact (a grace
		// later). Refusing from the window's end on, not from the due time,
		// leaves a complete the whole grace before it could meet the job
		// (which AbandonArtifact makes safe anyway). 409, not 410: renewing
		// the upload takes it back (until the job has failed it), then
		// complete works.
		return domain.Artifact{}, domain.Errorf(domain.CodeConflict,
			"the upload window ended at %s; renew the upload (POST /v1/artifacts/%s/upload), then complete again", a.UploadEnd().Format(time.RFC3339), a.ID)
	}
	if a.UploadID == "" && len(parts) > 0 {
		return domain.Artifact{}, domain.Invalid("parts", "this artifact went up in one request; parts must be absent")
	}

	var want string // S3's checksum of the object if the bytes are the declared ones
	if a.UploadID == "" {
		want, _ = blob.HexToBase64(a.SHA256)
	} else {
		if want, err = blob.CompositeSHA256(a.PartSHA256); err != nil {
			return domain.Artifact{}, domain.Internal(err)
		}
		if err := s.completeMultipart(ctx, a, parts); err != nil {
			return domain.Artifact{}, err
		}
	}
	obj, err := s.blobs.Head(ctx, a.Key)
	if errors.Is(err, blob.ErrNotFound) {
		if a.UploadID != "" {
			// The upload is gone and no object was made of it: nothing
			// more can be uploaded to this artifact.
			return domain.Artifact{}, s.fail(ctx, a, "the multipart upload no longer exists")
		}
		return domain.Artifact{}, domain.Invalid("", "nothing has been uploaded for this artifact yet")
	}
	if err != nil {
		return domain.Artifact{}, err
	}
	if obj.Size != a.Size || obj.SHA256 != want {
		return domain.Artifact{}, s.fail(ctx, a, "the uploaded bytes do not match the declared size and sha256")
	}

	kind := "full-object"
	if a.UploadID != "" {
		kind = "composite"
	}
	sealed := now
	a.Sealed = &sealed
	a.SealedBytes = obj.Size
	a.Chunks = max(1, len(a.PartSHA256))
	a.Segments = []domain.Segment{{Name: "data", Size: obj.Size, Objects: 1}}
	a.Manifest = "sha256/" + kind + ":" + obj.SHA256
	a.KeyVersion = domain.ArtifactKeyVersion
	if err := s.store.SealArtifact(ctx, a); err != nil {
		return domain.Artifact{}, err
	}
	a.State = domain.ArtifactSealed
	a.UploadID = ""
	return a, nil
}

// completeMultipart assembles the parts. Each carries the SHA-256 the client
// declared at create time, so S3 refuses parts that hold other bytes.
func (s *Service) completeMultipart(ctx context.Context, a domain.Artifact, given []CompletedPart) error {
	n := len(a.PartSHA256)
	var parts []blob.Part
	if len(given) > 0 {
		if len(given) != n {
			return domain.Invalid("parts", "this artifact has %d parts; %d given", n, len(given))
		}
		for i, g := range given {
			if g.PartNumber != i+1 || g.ETag == "" {
				return domain.Invalid("parts", "parts must list part numbers 1 to %d in order, each with its etag", n)
			}
			parts = append(parts, blob.Part{Number: int32(i + 1), ETag: g.ETag})
		}
	} else {
		listed, err := s.blobs.ListParts(ctx, a.Key, a.UploadID)
		if errors.Is(err, blob.ErrNoSuchUpload) {
			// Completed by an earlier call whose seal did not happen, or
			// aborted: the object (or its absence) says which.
			return nil
		}
		if err != nil {
			return err
		}
		have := map[int32]blob.Part{}
		for _, p := range listed {
			have[p.Number] = p
		}
		for i := int32(1); i <= int32(n); i++ {
			p, ok := have[i]
			if !ok {
				// Not a mismatch: the client can still upload it.
				return domain.Invalid("parts", "part %d of %d has not been uploaded yet", i, n)
			}
			parts = append(parts, p)
		}
	}
	for i := range parts {
		parts[i].SHA256, _ = blob.HexToBase64(a.PartSHA256[i])
	}
	err := s.blobs.CompleteMultipart(ctx, a.Key, a.UploadID, parts)
	switch {
	case err == nil, errors.Is(err, blob.ErrNoSuchUpload):
		return nil
	case errors.Is(err, blob.ErrRejected):
		return s.fail(ctx, a, "object storage refused the parts")
	}
	return err
}

// fail marks the artifact failed (so nothing can seal it) and removes what
// was uploaded. The client gets 422; the cleanup's own failure is logged, not
// shown. Its single-PUT request still works until the window ends, so the
// expiry job removes whatever is uploaded through it afterwards too (and
// whatever this cleanup missed).
func (s *Service) fail(ctx context.Context, a domain.Artifact, why string) error {
	if err := s.store.FailArtifact(ctx, a); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	var cleanup error
	if a.UploadID != "" {
		cleanup = s.blobs.AbortMultipart(ctx, a.Key, a.UploadID)
	}
	cleanup = errors.Join(cleanup, s.blobs.Delete(ctx, a.Key))
	return &domain.Error{
		Code:    domain.CodeInvalid,
		Field:   "sha256",
		Message: why + "; nothing was sealed and the upload was deleted, create a new artifact",
		Err:     cleanup,
	}
}

func gone() error {
	return domain.Errorf(domain.CodeGone, "the artifact has expired")
}

// Get returns one artifact of the caller's organization, in any state but
// expired (410).
func (s *Service) Get(ctx context.Context, p domain.Principal, id string) (domain.Artifact, error) {
	a, err := s.store.GetArtifact(ctx, p.OrgID, id)
	if err != nil {
		return domain.Artifact{}, err
	}
	if a.ExpiredAt(s.clock.Now()) {
		return domain.Artifact{}, gone()
	}
	return a, nil
}

// List returns sealed, unexpired artifacts of the caller's organization,
// newest first, one page at a time.
func (s *Service) List(ctx context.Context, p domain.Principal, limit int, cursor string) ([]domain.Artifact, string, error) {
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, "", domain.BadRequest("limit", "limit must be between 1 and %d", MaxListLimit)
	}
	return s.store.ListArtifacts(ctx, p.OrgID, s.clock.Now(), limit, cursor)
}

// LinkHeir is what a download link carries of its maker: it reads one
// artifact (artifacts:read), which restrictions do not govern, and ends
// no later than a limited maker.
var LinkHeir = auth.Heir{What: "a download link", ActsWith: []string{domain.ScopeArtifactsRead}, RestrictionsChecked: true}

// Link signs a download link for an artifact of the caller's organization.
// Its expiry is min(requested, the artifact's expiry, MaxLinkExpiry). The cost
// is one DynamoDB read and local signing: no request goes to S3.
func (s *Service) Link(ctx context.Context, p domain.Principal, id, expires string) (domain.Link, error) {
	now := s.clock.Now()
	until := now.Add(DefaultLinkExpiry)
	if expires != "" {
		var err error
		if until, err = ParseExpiry(expires, now); err != nil {
			return domain.Link{}, err
		}
	}
	// A link works for whoever holds it: it ends with a scoped or
	// restricted maker, as everything such a token makes does.
	lim, err := auth.Inherit(p, LinkHeir, auth.Limits{Expires: &until})
	if err != nil {
		return domain.Link{}, err
	}
	until = *lim.Expires
	a, err := s.store.GetArtifact(ctx, p.OrgID, id)
	if err != nil {
		return domain.Link{}, err
	}
	if !until.After(now) {
		return domain.Link{}, domain.Errorf(domain.CodeUnauthorized, "this token has expired")
	}
	return s.link(ctx, a, until.Sub(now), now)
}

// LinkFor signs a download link for an artifact the caller has already read
// and authorized, valid for at most ttl: the server side of restoring a
// snapshot, where the node fetches the artifact through it.
func (s *Service) LinkFor(ctx context.Context, a domain.Artifact, ttl time.Duration) (domain.Link, error) {
	if ttl <= 0 {
		return domain.Link{}, domain.Internal(fmt.Errorf("link ttl %s", ttl))
	}
	return s.link(ctx, a, ttl, s.clock.Now())
}

func (s *Service) link(ctx context.Context, a domain.Artifact, ttl time.Duration, now time.Time) (domain.Link, error) {
	if a.ExpiredAt(now) {
		return domain.Link{}, gone()
	}
	if a.State != domain.ArtifactSealed {
		return domain.Link{}, domain.Errorf(domain.CodeConflict, "the artifact is not sealed; complete its upload first")
	}
	ttl = min(ttl, a.Expires.Sub(now), MaxLinkExpiry)
	// SigV4 counts whole seconds; rounding down keeps the link inside the
	// artifact's life.
	ttl = ttl.Truncate(time.Second)
	if ttl < time.Second {
		return domain.Link{}, gone()
	}
	ps, err := s.blobs.PresignGet(ctx, a.Key, downloadName(a.Name), a.ContentType, ttl)
	if err != nil {
		return domain.Link{}, err
	}
	return domain.Link{URL: ps.URL, Expires: ps.Expires}, nil
}

// downloadName is the file name a browser saves the download as: the
// artifact's name without directories.
func downloadName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return name
}
