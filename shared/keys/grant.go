package keys

import (
	"context"
	"slices"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
)

// TokenHeir is what a CLI token or an organization key carries of its
// maker: scopes and restrictions of its own, capped by the maker's.
var TokenHeir = auth.Heir{What: "a token", Scopes: true, Restrictions: true}

// Grant is what a new token or key may do and for how long: the optional
// part of POST /v1/tokens and POST /v1/keys. The zero Grant is a token
// with every right of its holder that lives until revoked (unless the
// organization caps lifetimes).
type Grant struct {
	// Scopes limit the routes it may use; nil is every right.
	Scopes []string `json:"scopes"`
	// Restrictions limit what it may lease.
	Restrictions *domain.Restrictions `json:"restrictions,omitempty"`
	// ExpiresIn is its lifetime ("1h", "720h"); empty for none.
	ExpiresIn string `json:"expiresIn,omitempty"`
}

// OrgReader is how the service learns an organization's token lifetime cap.
type OrgReader interface {
	GetOrg(ctx context.Context, id string) (domain.Org, error)
}

// applyGrant checks g against the holder's role (role caps scopes), against
// the caller's own token (a scoped or expiring token mints nothing wider or
// longer-lived than itself) and the organization's lifetime cap, and sets
// the result on k.
func (s *Service) applyGrant(ctx context.Context, p domain.Principal, role domain.Role, g Grant, now time.Time, k *domain.APIKey) error {
	scopes, err := domain.NormalizeScopes(g.Scopes, role)
	if err != nil {
		return err
	}
	restr, err := domain.NormalizeRestrictions(g.Restrictions)
	if err != nil {
		return err
	}
	var expires *time.Time
	if g.ExpiresIn != "" {
		d, err := domain.ParseDuration(g.ExpiresIn)
		if err != nil || d.Std() < time.Minute {
			return domain.Invalid("expiresIn", "expiresIn must be a duration of at least 1m, such as 1h or 720h")
		}
		at := now.Add(d.Std()).UTC()
		expires = &at
	}
	if max, err := s.maxLifetime(ctx, p.OrgID); err != nil {
		return err
	} else if max > 0 {
		limit := now.Add(max).UTC()
		switch {
		case expires == nil:
			// The organization wants every token to end: one asked for
			// without an expiry gets the longest allowed.
			expires = &limit
		case expires.After(limit):
			return domain.Invalid("expiresIn", "expiresIn must be at most %s, the organization's maximum token lifetime", domain.Duration(max))
		}
	}
	// The one rule of everything a token makes (auth.Inherit): nothing
	// wider than the caller's scopes and restrictions, and nothing that
	// outlives a scoped or restricted caller (an exchanged CI token, say).
	lim, err := auth.Inherit(p, TokenHeir, auth.Limits{Scopes: scopes, Restrictions: restr, Expires: expires})
	if err != nil {
		return err
	}
	scopes, restr, expires = lim.Scopes, lim.Restrictions, lim.Expires
	if g.Scopes == nil && role != domain.RoleAdmin && slices.ContainsFunc(scopes, domain.IsAdminScope) {
		// Inherited from an admin's scoped token (an organization key it
		// makes acts as a member): the admin scopes stay with admins.
		scopes = slices.DeleteFunc(slices.Clone(scopes), domain.IsAdminScope)
		if len(scopes) == 0 {
			return domain.Invalid("scopes", "this token holds only the admin scope, which a member's token or an organization key cannot carry: name its scopes")
		}
	}
	if restr.Empty() {
		restr = nil
	}
	k.Scopes, k.Restrictions, k.Expires = scopes, restr, expires
	return nil
}

// maxLifetime is the organization's cap on token lifetimes, 0 for none.
// Only creating a token reads it; authenticating one never does.
func (s *Service) maxLifetime(ctx context.Context, org string) (time.Duration, error) {
	if s.orgs == nil {
		return 0, nil
	}
	o, err := s.orgs.GetOrg(ctx, org)
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return o.MaxTokenLifetime.Std(), nil
}
