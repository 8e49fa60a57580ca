package identity

import (
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/envlease/envlease/shared/domain"
)

// Claims are what a token of an environment says (docs/identity.md).
type Claims struct {
	Issuer    string           `json:"iss"`
	Subject   string           `json:"sub"`
	Audience  string           `json:"aud"`
	Expiry    *jwt.NumericDate `json:"exp"`
	IssuedAt  *jwt.NumericDate `json:"iat"`
	NotBefore *jwt.NumericDate `json:"nbf"`
	ID        string           `json:"jti,omitempty"`

	Org         string            `json:"org"`
	Template    string            `json:"template"`
	Project     string            `json:"project"`
	Labels      map[string]string `json:"labels"`
	Environment string            `json:"environment"`
	Pool        string            `json:"pool"`
	// LeasedBy is who leased it: a person's id, or key:<id> for an
	// organization key (domain.Principal.Actor); LeasedByKind says which
	// ("user" or "key").
	LeasedBy     string `json:"leasedBy"`
	LeasedByKind string `json:"leasedByKind"`
}

// Subject is the sub claim of an environment's tokens:
//
//	org:<org>:template:<template>:project:<project>
//
// Organization ids and template names hold no ":", so the parts cannot be
// confused; the project, free text, comes last (empty when the lease named
// none) and a trust policy matches it exactly or by a prefix it ends with
// ":project:" plus the project.
func Subject(org, template, project string) string {
	return strings.Join([]string{"org", org, "template", template, "project", project}, ":")
}

// ClaimsFor are the claims of e's token for audience aud, issued at now.
// jti is the token's own id ("" while only showing the claims).
func ClaimsFor(issuer string, e domain.Environment, aud string, now time.Time, jti string) Claims {
	life := domain.IdentityDefaultLifetime
	if e.Identity != nil {
		life = e.Identity.LifetimeOrDefault()
	}
	kind, by := "user", e.CreatedBy
	if strings.HasPrefix(by, "key:") {
		kind = "key"
	}
	labels := e.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	now = now.Truncate(time.Second)
	// No token outlives its lease: clouds trust it for the environment, and
	// past the hard end there is none.
	exp := now.Add(life)
	if end := e.Expires.Truncate(time.Second); !e.Expires.IsZero() && end.Before(exp) && !end.Before(now) {
		exp = end
	}
	return Claims{
		Issuer: issuer, Subject: Subject(e.OrgID, e.Template, e.Project), Audience: aud,
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(exp),
		ID: jti, Org: e.OrgID, Template: e.Template, Project: e.Project, Labels: labels, Environment: e.ID,
		Pool: e.Pool, LeasedBy: by, LeasedByKind: kind,
	}
}
