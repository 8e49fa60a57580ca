package domain

import "time"

// Role is a person's role in an organization.
type Role string

const (
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleMember }

// Org is an organization: the unit every resource is scoped to.
type Org struct {
	ID    string   `json:"id"`
	Name  string   `json:"name"`
	Pools []string `json:"pools"`
	// MaxTokenLifetime caps the expiry of new tokens and keys: with it
	// set, every one expires within it. Zero leaves expiry optional.
	MaxTokenLifetime Duration `json:"maxTokenLifetime,omitempty"`
	// MaxPreviewLifetime caps preview links' life (docs/previews.md); zero
	// leaves the service's maximum.
	MaxPreviewLifetime Duration `json:"maxPreviewLifetime,omitempty"`
	// ForbidPublicExports refuses templates with public exports, and
	// nodes open none of its exports without a token.
	ForbidPublicExports bool `json:"forbidPublicExports,omitempty"`
}

// User is a person in an organization.
type User struct {
	OrgID string `json:"org"`
	ID    string `json:"id"`
	Role  Role   `json:"role"`
}

// Credential kinds say what a bearer token is.
const (
	// CredentialCLI is a CLI token: it belongs to a person and acts as them.
	CredentialCLI = "cli"
	// CredentialOrg is an organization API key: it belongs to the organization.
	CredentialOrg = "org"
	// CredentialNode is a node credential: it belongs to one pool and serves only the node API.
	CredentialNode = "node"
)

// Owner says who a key belongs to.
type Owner struct {
	// Kind is "user", "organization" or "pool".
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// APIKey is the record of an issued bearer token (spec 2.4). The secret is
// never part of it; only its SHA-256 is stored.
type APIKey struct {
	ID        string     `json:"id"`
	Kind      string     `json:"kind"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	CreatedBy string     `json:"createdBy"`
	Source    string     `json:"source"`
	Created   time.Time  `json:"created"`
	LastUsed  *time.Time `json:"lastUsed"`
	Revoked   *time.Time `json:"revoked"`
	// Expires is when the token stops working by itself; nil for tokens
	// that work until revoked. Only the console's sign-in tokens (minted
	// by exchanging an envlease console code) have one.
	Expires *time.Time `json:"expires,omitempty"`
	// Owner is added to the spec's record: `kind` stays "org" for every key
	// issued today, so this says whose key it is.
	Owner Owner `json:"owner"`
	// Scopes limit what the token may do (see scope.go); nil is every
	// right of its holder, as for every token issued before scopes.
	Scopes []string `json:"scopes,omitempty"`
	// Restrictions limit what it may lease; nil restricts nothing.
	Restrictions *Restrictions `json:"restrictions,omitempty"`
	// Exchange says which CI identity a token exchanged for it came from
	// (set only on the record a token exchange issues, and on its event).
	Exchange *Exchange `json:"exchange,omitempty"`

	OrgID string `json:"-"`
	// Credential is one of the Credential* kinds.
	Credential string `json:"-"`
	UserID     string `json:"-"`
	Role       Role   `json:"-"`
	Pool       string `json:"-"`
	Hash       string `json:"-"`
}

// Principal is the authenticated caller of a request.
type Principal struct {
	OrgID string
	// UserID is set for CLI tokens; empty for organization keys and nodes.
	UserID     string
	Role       Role
	KeyID      string
	Credential string
	// Pool is set for node credentials.
	Pool string
	// KeyHash is the credential's SHA-256, the key record's lookup key. A
	// node protocol connection keeps the principal it authenticated with for
	// its life, so the writes that act for a node (a claim, the heartbeat
	// that keeps it alive) check in their own transaction that the record is
	// not revoked since.
	KeyHash string
	// Expires is the credential's own end, nil when it has none.
	Expires *time.Time
	// Scopes and Restrictions come from the key record authentication
	// read: deciding them costs no further read.
	Scopes       []string
	Restrictions *Restrictions
	// Recheck says the credential was authenticated before this request
	// (when its node protocol connection opened), not with it: everything
	// the request reads or writes for the node also checks the key record
	// is still unrevoked, in that same call.
	Recheck bool
}

// IsAdmin reports whether the caller may manage the organization.
func (p Principal) IsAdmin() bool { return p.Role == RoleAdmin }

// Actor is what createdBy records: the person, or the key for organization keys.
func (p Principal) Actor() string {
	if p.UserID != "" {
		return p.UserID
	}
	return "key:" + p.KeyID
}

// AddressState is the failed-attempt record of one peer address.
type AddressState struct {
	// Recent are the failures that still count towards a block.
	Recent       []time.Time
	BlockedUntil time.Time
}

// Blocked reports whether the address is refused at now, and for how long.
func (a AddressState) Blocked(now time.Time) (bool, time.Duration) {
	if a.BlockedUntil.After(now) {
		return true, a.BlockedUntil.Sub(now)
	}
	return false, 0
}

// ConsoleCode is a short-lived, single-use code that signs the web console
// in as the person whose CLI token asked for it (envlease console). Only its
// SHA-256 is stored; exchanging it mints a console token of that person.
type ConsoleCode struct {
	Hash  string
	OrgID string
	// UserID and Role are the person's, as the asking token had them.
	UserID string
	Role   Role
	// KeyHash is the asking token's hash: the exchange checks in its own
	// transaction that the token has not been revoked since.
	KeyHash string
	Created time.Time
	Expires time.Time
	// TokenExpires bounds the console token the code buys: its maker's
	// expiry as auth.Inherit carried it, nil when the maker has none.
	TokenExpires *time.Time
}

// ConsoleCodeSpent is the refusal of a console code that is unknown, used or
// expired: one answer for all three, so a caller learns nothing from it.
func ConsoleCodeSpent() *Error {
	return Errorf(CodeUnauthorized, "the sign-in code is unknown, already used or expired; run envlease console again")
}
