package domain

import "time"

// Sandbox is a registered client machine. Environments forward their exports
// to it and receive its shares. The spec leaves the record's fields open.
type Sandbox struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hostname  string    `json:"hostname"`
	PublicKey string    `json:"publicKey"`
	CreatedBy string    `json:"createdBy"`
	Created   time.Time `json:"created"`
	// Joined is when its network-join key was redeemed; null until then.
	Joined *time.Time `json:"joined"`
	// JoinKeyPrefix is the leading characters of the join key, for recognition.
	JoinKeyPrefix string `json:"joinKeyPrefix"`

	OrgID string `json:"-"`
	// JoinKeyHash is the SHA-256 of the join key; the key itself is never stored.
	JoinKeyHash string `json:"-"`
}
