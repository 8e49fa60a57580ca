package domain

import "time"

// Artifact states. An artifact is created open, becomes sealed once its bytes
// are verified, and is expired (a tombstone) after its expiry. failed means
// verification found other bytes than declared; nothing was sealed.
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

// UsableAt reports whether the artifact can be read at now: sealed and
// unexpired. Leasing checks a snapshot with it.
func (a Artifact) UsableAt(now time.Time) bool {
	return a.State == ArtifactSealed && !a.ExpiredAt(now)
}
