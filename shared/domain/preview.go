package domain

import "time"

// Preview is a link that opens one web export of an environment in a
// browser, straight at its node, until it expires or is revoked. It is kept
// on the environment's record (a handful per environment, gone with it); its
// token is never stored, since the service can sign the same one again.
type Preview struct {
	ID      string    `json:"id"`
	Export  string    `json:"export"`
	Host    string    `json:"host"`
	Expires time.Time `json:"expires"`
	Created time.Time `json:"created"`
	// CreatedBy is the user or key that made it.
	CreatedBy string `json:"createdBy"`
	// Revoked is when it was revoked; nil while it opens.
	Revoked *time.Time `json:"revoked,omitempty"`
}

// Live says whether p still opens at now.
func (p Preview) Live(now time.Time) bool { return p.Revoked == nil && now.Before(p.Expires) }

// Event types of previews.
const (
	EventEnvPreview        = "environment.preview"
	EventEnvPreviewRevoked = "environment.preview.revoked"
)
