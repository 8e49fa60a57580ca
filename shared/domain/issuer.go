package domain

import "time"

// TrustedIssuer is an OIDC issuer an organization trusts to vouch for its
// CI jobs: an identity token it signed, for Audience, whose claims meet
// Conditions, is exchanged for a short-lived token with Scopes and
// Restrictions that lives for TokenLifetime (docs/ci.md).
type TrustedIssuer struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	URL      string `json:"url"`
	Audience string `json:"audience"`
	// Conditions map a claim to the value it must have: exact, or a
	// pattern such as refs/heads/* (MatchCondition).
	Conditions    map[string]string `json:"conditions"`
	Scopes        []string          `json:"scopes"`
	Restrictions  *Restrictions     `json:"restrictions,omitempty"`
	TokenLifetime Duration          `json:"tokenLifetime"`
	// Expires is when it stops trusting, inherited from a scoped or
	// restricted token that registered it; nil for never.
	Expires   *time.Time `json:"expires,omitempty"`
	Created   time.Time  `json:"created"`
	CreatedBy string     `json:"createdBy"`

	OrgID string `json:"-"`
}

// IssuerRequest is the body of POST /v1/issuers, which registers a
// TrustedIssuer (TokenLifetime as a duration string).
type IssuerRequest struct {
	Name          string            `json:"name"`
	URL           string            `json:"url"`
	Audience      string            `json:"audience"`
	Conditions    map[string]string `json:"conditions"`
	Scopes        []string          `json:"scopes"`
	Restrictions  *Restrictions     `json:"restrictions,omitempty"`
	TokenLifetime string            `json:"tokenLifetime,omitempty"`
}
