package domain

import "time"

// Artifact states. An artifact is created open, becomes sealed once its bytes
// are verified, and is expired (a tombstone) after its expiry. failed means
// nothing was sealed: verification found other bytes than declared, or the
// upload window ended without a complete and the expiry job is removing what
// was uploaded. Open and failed artifacts become tombstones too, once their
// upload requests have stopped working (DueAt).
const (
	ArtifactOpen    = "open"
	ArtifactSealed  = "sealed"
	ArtifactFailed  = "failed"
	ArtifactExpired = "expired"
)

// ArtifactKeyVersion is the storage layout and encryption scheme of objects
// sealed today: one object at orgs/<org>/artifacts/<id>/data, SSE-S3 (AES256).
const ArtifactKeyVersion = 1

// Artifact is a sealed file of an organization (spec 2.3).
type Artifact struct {
	ID          string            `json:"id"`
	Project     string            `json:"project"`
	Name        string            `json:"name"`
	Size        int64             `json:"size"`
	SHA256      string            `json:"sha256"`
	ContentType string            `json:"contentType"`
	Labels      map[string]string `json:"labels"`
	KeyVersion  int               `json:"keyVersion"`
	Manifest    string            `json:"manifest"`
	Segments    []Segment         `json:"segments"`
	Chunks      int               `json:"chunks"`
	SealedBytes int64             `json:"sealedBytes"`
	CreatedBy   string            `json:"createdBy"`
	Created     time.Time         `json:"created"`
	Expires     time.Time         `json:"expires"`
	// State and Sealed are added to the spec's record: open, sealed, failed
	// or expired, and when the bytes were verified.
	State  string     `json:"state"`
	Sealed *time.Time `json:"sealed"`

	OrgID string `json:"-"`
	// Key is the object key of the data.
	Key string `json:"-"`
	// UploadID is the S3 multipart upload of an open artifact ("" for a single PUT).
	UploadID string `json:"-"`
	// PartSize and PartSHA256 are the declared layout of a multipart upload:
	// every part but the last is PartSize bytes, and part i+1 has PartSHA256[i].
	PartSize   int64    `json:"-"`
	PartSHA256 []string `json:"-"`
	// UploadUntil is when the presigned upload requests handed out last (at
	// create or at the latest renewal) stop working; never past Expires.
	// Zero on records written before it existed.
	UploadUntil time.Time `json:"-"`
}

// Segment is one stored piece of an artifact.
type Segment struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Objects int    `json:"objects"`
}

// Link is a signed download link (spec 2.3).
type Link struct {
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

// ExpiredAt reports whether the artifact is gone at now. Readers call it
// themselves: DynamoDB TTL removes items lazily, and the expiry job runs on a
// schedule, so a stored state of sealed does not mean unexpired.
func (a Artifact) ExpiredAt(now time.Time) bool {
	return a.State == ArtifactExpired || !now.Before(a.Expires)
}

// ArtifactUploadGrace is how long after its upload requests stop working an
// open or failed artifact is left alone. S3 checks a presigned request's
// expiry when the request starts, so an upload started just before then may
// still be landing; cleaning earlier would leave its bytes behind.
const ArtifactUploadGrace = 15 * time.Minute

// UploadEnd is when the artifact's presigned uploads stop working. A record
// without UploadUntil gets its expiry: no upload request outlives the
// artifact, so that bound holds whatever was signed for it.
func (a Artifact) UploadEnd() time.Time {
	if a.UploadUntil.IsZero() {
		return a.Expires
	}
	return a.UploadUntil
}

// DueAt is when the expiry job removes the artifact's objects and leaves a
// tombstone: a sealed one at its expiry, an open or failed one (bytes that
// were never sealed, or that arrived after a failure) once its upload
// requests have stopped working and any started before then has landed.
// ok is false for a tombstone.
func (a Artifact) DueAt() (t time.Time, ok bool) {
	switch a.State {
	case ArtifactSealed:
		return a.Expires, true
	case ArtifactOpen, ArtifactFailed:
		return a.UploadEnd().Add(ArtifactUploadGrace), true
	}
	return time.Time{}, false
}

// UsableAt reports whether the artifact can be read at now: sealed and
// unexpired. Leasing checks a snapshot with it.
func (a Artifact) UsableAt(now time.Time) bool {
	return a.State == ArtifactSealed && !a.ExpiredAt(now)
}

// UploadPart is one presigned upload request of an artifact: PUT bytes
// [Offset, Offset+Size) of the file to URL with exactly Headers. The service
// hands these out and the clients follow them: one shape for both.
type UploadPart struct {
	PartNumber int               `json:"partNumber"`
	Offset     int64             `json:"offset"`
	Size       int64             `json:"size"`
	SHA256     string            `json:"sha256"`
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers"`
}

// Upload says how to send an open artifact's bytes.
type Upload struct {
	Multipart bool         `json:"multipart"`
	PartSize  int64        `json:"partSize"`
	Expires   time.Time    `json:"expires"`
	Parts     []UploadPart `json:"parts"`
}
