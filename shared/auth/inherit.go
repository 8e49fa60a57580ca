package auth

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// A credential never outlives or outranks its maker. Everything a token can
// make that acts after the request that made it (a CLI token, an
// organization key, a node credential, a trusted issuer whose exchanges mint
// tokens, a webhook that receives events, a signed download link) goes
// through Inherit, so the rule is written once: what the new thing carries
// is capped by the maker's scopes and restrictions, a limited maker's expiry
// carries over, and what the new thing cannot carry is refused with a 403
// that says why.
//
// Expiry carries over only from a limited maker (scoped or restricted, such
// as an exchanged CI token): an unlimited token is its holder acting in
// full, who could as well mint a lasting token with POST /v1/tokens, so
// capping what it makes would protect nothing and would make the console's
// 12-hour sign-in token create webhooks and node credentials that vanish at
// the end of the day.

// Heir says what a kind of credential, or of standing grant, can carry of
// its maker's limits.
type Heir struct {
	// What names it in refusals: "a node credential".
	What string
	// Scopes: it records scopes that bound its own use, which are capped
	// by the maker's. When false, ActsWith is what it exercises.
	Scopes bool
	// ActsWith lists the scopes it acts with when it carries none; a
	// scoped maker must hold them all. domain.AllScopes for a credential
	// whose rights no scope names (a node's).
	ActsWith []string
	// Restrictions: it records restrictions that bound what it may lease,
	// capped by the maker's. When false, a restricted maker is refused.
	Restrictions bool
	// RestrictionsChecked: what it reaches was already checked against
	// the maker's restrictions, or is not governed by them (they bound
	// leasing), so a restricted maker may make it without it carrying any.
	RestrictionsChecked bool
}

// Limits are a credential's scopes (nil: every right of its holder),
// restrictions (nil: none) and expiry (nil: none).
type Limits struct {
	Scopes       []string
	Restrictions *domain.Restrictions
	Expires      *time.Time
}

// Limited reports whether p is narrower than its holder: a scoped or
// restricted token. Node credentials carry neither and make nothing.
func Limited(p domain.Principal) bool {
	return p.Scopes != nil || !p.Restrictions.Empty()
}

// Inherit returns the limits a new h made by p may have, given the ones
// asked for (want): scopes and restrictions narrowed to p's, and, when p
// is limited and expires, an expiry no later than p's. It refuses (403)
// a scope or restriction p does not hold, and a maker whose limits h
// cannot carry.
func Inherit(p domain.Principal, h Heir, want Limits) (Limits, error) {
	out := want
	if h.Scopes {
		s, err := domain.CapScopes(want.Scopes, p.Scopes)
		if err != nil {
			return Limits{}, err
		}
		out.Scopes = s
	} else if p.Scopes != nil {
		var lack []string
		for _, s := range h.ActsWith {
			if !slices.Contains(p.Scopes, s) {
				lack = append(lack, s)
			}
		}
		if len(lack) > 0 {
			return Limits{}, &domain.Error{Code: domain.CodeInsufficientScope, Field: "scopes", Message: fmt.Sprintf(
				"%s carries no scopes and acts with %s, which this token does not hold (%s): make it with a token that holds them",
				h.What, scopeList(h.ActsWith), strings.Join(lack, ", "))}
		}
	}
	if h.Restrictions {
		r, err := domain.CapRestrictions(want.Restrictions, p.Restrictions)
		if err != nil {
			return Limits{}, err
		}
		out.Restrictions = r
	} else if !h.RestrictionsChecked && !p.Restrictions.Empty() {
		return Limits{}, &domain.Error{Code: domain.CodeRestricted, Field: "restrictions", Message: fmt.Sprintf(
			"this token is restricted in what it may lease, and %s cannot carry restrictions: make it with an unrestricted token", h.What)}
	}
	if Limited(p) && p.Expires != nil && (want.Expires == nil || want.Expires.After(*p.Expires)) {
		at := p.Expires.UTC()
		out.Expires = &at
	}
	return out, nil
}

// scopeList names a set of scopes in a refusal; every scope is "every right".
func scopeList(s []string) string {
	if len(s) >= len(domain.AllScopes) {
		return "every right of its maker"
	}
	return strings.Join(s, ", ")
}
