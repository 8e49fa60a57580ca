package domain

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Scopes a token may carry. Each API route needs one of them (the table is
// httpapi's routeScopes); a token without scopes has every right of its
// holder, as every token issued before scopes had. The holder's role caps
// them all: only an admin's token may carry ScopeAdmin.
const (
	// ScopeEnvLease: lease, touch, tunnel into and release environments;
	// register sandboxes.
	ScopeEnvLease = "environments:lease"
	// ScopeEnvExec: run commands and shells inside environments (exec),
	// which reaches everything the environment holds, so it is a scope of
	// its own rather than part of leasing.
	ScopeEnvExec = "environments:exec"
	// ScopeEnvNetwork: change a running environment's network rules, which
	// decide what it reaches, so it is a scope of its own.
	ScopeEnvNetwork = "environments:network"
	// ScopeEnvRead: read environments, sandboxes, templates and quotas.
	ScopeEnvRead = "environments:read"
	// ScopeArtifactsRead: list artifacts and make download links.
	ScopeArtifactsRead = "artifacts:read"
	// ScopeArtifactsWrite: upload artifacts.
	ScopeArtifactsWrite = "artifacts:write"
	// ScopeUsageRead: read usage.
	ScopeUsageRead = "usage:read"
	// ScopeEventsRead: read the event stream.
	ScopeEventsRead = "events:read"
	// ScopeTokensRead: list the key records the holder may see.
	ScopeTokensRead = "tokens:read"
	// ScopeTokensWrite: create (never beyond its own scopes and expiry)
	// and revoke tokens, and ask for console sign-in codes.
	ScopeTokensWrite = "tokens:write"
	// ScopeSecretsRead and ScopeSecretsWrite (secret.go): list secrets'
	// names; set and delete them (admins only, like ScopeAdmin).

	// ScopeAdmin: the admin routes (organization keys, node credentials,
	// webhooks, trusted issuers); only for an admin's token.
	ScopeAdmin = "admin"
)

// IsAdminScope says whether only an admin's token may carry s: the admin
// scope, and setting secrets (an admin route that has a scope of its own so
// a token can be given that right alone).
func IsAdminScope(s string) bool { return s == ScopeAdmin || s == ScopeSecretsWrite }

// AllScopes is the documented set, in the order listings show it.
var AllScopes = []string{
	ScopeEnvLease, ScopeEnvExec, ScopeEnvNetwork, ScopeEnvRead, ScopeArtifactsRead, ScopeArtifactsWrite,
	ScopeUsageRead, ScopeEventsRead, ScopeTokensRead, ScopeTokensWrite, ScopeSecretsRead, ScopeSecretsWrite, ScopeAdmin,
}

// MsgTokenExpired is the 401 message of an expired token; the challenge
// repeats it as its error_description.
const MsgTokenExpired = "token has expired"

// Limits of restrictions, so a key record stays small.
const (
	MaxRestrictionValues = 20
	MaxRestrictionLabels = 10
)

// Restrictions narrow what a token may lease. Empty lists restrict nothing.
type Restrictions struct {
	// Templates it may lease (exact names).
	Templates []string `json:"templates,omitempty"`
	// Projects it may lease into; a lease must name one of them.
	Projects []string `json:"projects,omitempty"`
	// Labels every lease must set to exactly these values.
	Labels map[string]string `json:"labels,omitempty"`
}

// Empty reports whether r restricts nothing.
func (r *Restrictions) Empty() bool {
	return r == nil || (len(r.Templates) == 0 && len(r.Projects) == 0 && len(r.Labels) == 0)
}

// NormalizeScopes checks scopes against the documented set and the holder's
// role and returns them sorted and without repeats. nil stays nil (every
// right); an empty non-nil list is refused, as a token that can do nothing
// is a mistake.
func NormalizeScopes(scopes []string, role Role) ([]string, error) {
	if scopes == nil {
		return nil, nil
	}
	if len(scopes) == 0 {
		return nil, Invalid("scopes", "scopes must name at least one scope, or be left out for every right; scopes are %s", strings.Join(AllScopes, ", "))
	}
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		if !slices.Contains(AllScopes, s) {
			return nil, Invalid("scopes", "unknown scope %q; scopes are %s", s, strings.Join(AllScopes, ", "))
		}
		if IsAdminScope(s) && role != RoleAdmin {
			return nil, Errorf(CodeForbidden, "only an organization admin's token can carry the %s scope", s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out, nil
}

// CapScopes narrows requested to what a caller holding have may grant: a
// scoped token can mint only tokens within its own scopes. nil have is
// every right; nil requested under a scoped caller becomes the caller's own.
func CapScopes(requested, have []string) ([]string, error) {
	if have == nil {
		return requested, nil
	}
	if requested == nil {
		return slices.Clone(have), nil
	}
	for _, s := range requested {
		if !slices.Contains(have, s) {
			return nil, &Error{Code: CodeInsufficientScope, Field: "scopes",
				Message: fmt.Sprintf("this token cannot grant the scope %s, which it does not hold", s)}
		}
	}
	return requested, nil
}

// NormalizeRestrictions checks r's values and returns nil for an empty one.
func NormalizeRestrictions(r *Restrictions) (*Restrictions, error) {
	if r.Empty() {
		return nil, nil
	}
	if len(r.Templates) > MaxRestrictionValues || len(r.Projects) > MaxRestrictionValues {
		return nil, Invalid("restrictions", "restrictions list at most %d templates and %d projects", MaxRestrictionValues, MaxRestrictionValues)
	}
	for _, t := range r.Templates {
		if err := ValidateText("restrictions.templates", t, 100); err != nil || t == "" {
			return nil, Invalid("restrictions.templates", "a template name is 1-100 characters")
		}
	}
	for _, p := range r.Projects {
		if err := ValidateText("restrictions.projects", p, 200); err != nil || p == "" {
			return nil, Invalid("restrictions.projects", "a project is 1-200 characters")
		}
	}
	if len(r.Labels) > MaxRestrictionLabels {
		return nil, Invalid("restrictions.labels", "restrictions set at most %d labels", MaxRestrictionLabels)
	}
	if err := ValidateLabels(r.Labels); err != nil {
		return nil, Invalid("restrictions.labels", "%s", AsError(err).Message)
	}
	out := &Restrictions{Templates: slices.Clone(r.Templates), Projects: slices.Clone(r.Projects), Labels: r.Labels}
	sort.Strings(out.Templates)
	sort.Strings(out.Projects)
	return out, nil
}

// CapRestrictions keeps a token minted by a restricted caller at least as
// restricted: the caller's restrictions are added to the requested ones
// where the request leaves them open, and a request may not widen them.
func CapRestrictions(requested, have *Restrictions) (*Restrictions, error) {
	if have.Empty() {
		return requested, nil
	}
	out := &Restrictions{}
	if requested != nil {
		*out = *requested
	}
	narrow := func(field string, req, own []string) ([]string, error) {
		if len(own) == 0 {
			return req, nil
		}
		if len(req) == 0 {
			return slices.Clone(own), nil
		}
		for _, v := range req {
			if !slices.Contains(own, v) {
				return nil, &Error{Code: CodeRestricted, Field: "restrictions." + field,
					Message: fmt.Sprintf("this token is restricted to other %s than %q", field, v)}
			}
		}
		return req, nil
	}
	var err error
	if out.Templates, err = narrow("templates", out.Templates, have.Templates); err != nil {
		return nil, err
	}
	if out.Projects, err = narrow("projects", out.Projects, have.Projects); err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range out.Labels {
		labels[k] = v
	}
	for k, v := range have.Labels {
		if got, ok := labels[k]; ok && got != v {
			return nil, &Error{Code: CodeRestricted, Field: "restrictions.labels",
				Message: fmt.Sprintf("this token must set label %s to %q", k, v)}
		}
		labels[k] = v
	}
	out.Labels = labels
	return out, nil
}

// HasScope reports whether the principal's token may use a route that
// needs scope; "" is a route every token may use.
func (p Principal) HasScope(scope string) bool {
	return scope == "" || p.Scopes == nil || slices.Contains(p.Scopes, scope)
}

// MissingScope is the 403 of a request outside the token's scopes.
func MissingScope(scope string) *Error {
	return &Error{Code: CodeInsufficientScope, Message: "this token lacks the scope " + scope + " that this request needs"}
}

// CheckLease refuses a lease the restrictions do not allow; nil allows all.
func (r *Restrictions) CheckLease(template, project string, labels map[string]string) error {
	if r.Empty() {
		return nil
	}
	if len(r.Templates) > 0 && !slices.Contains(r.Templates, template) {
		return &Error{Code: CodeRestricted, Field: "template", Message: fmt.Sprintf("this token may not lease template %q", template)}
	}
	if len(r.Projects) > 0 && !slices.Contains(r.Projects, project) {
		return &Error{Code: CodeRestricted, Field: "project", Message: fmt.Sprintf("this token may lease only into its projects, not %q", project)}
	}
	keys := make([]string, 0, len(r.Labels))
	for k := range r.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if labels[k] != r.Labels[k] {
			return &Error{Code: CodeRestricted, Field: "labels", Message: fmt.Sprintf("this token's leases must set label %s to %q", k, r.Labels[k])}
		}
	}
	return nil
}

// CheckEnv refuses acting on an environment (deleting, touching, a tunnel,
// a command inside, its log, a checkpoint) that the restrictions would not
// have let the token lease: a token restricted to a template or a project
// reaches only its own kind of environments. nil allows all.
func (r *Restrictions) CheckEnv(e Environment) error {
	if r.Empty() {
		return nil
	}
	if err := r.CheckLease(e.Template, e.Project, e.Labels); err != nil {
		return &Error{Code: CodeRestricted, Message: fmt.Sprintf("this token's restrictions do not reach environment %s: %s", e.ID, err.(*Error).Message)}
	}
	return nil
}

// MatchCondition reports whether a claim value meets a condition: exact,
// or a path.Match pattern ("refs/heads/*") when the condition has one.
func MatchCondition(condition, value string) bool {
	if condition == value {
		return true
	}
	if !strings.ContainsAny(condition, "*?[") {
		return false
	}
	ok, err := path.Match(condition, value)
	return err == nil && ok
}

// Exchange is the CI identity a token was exchanged for: the trusted issuer
// that vouched for it and the identity token's subject and claims the
// issuer's conditions looked at.
type Exchange struct {
	Issuer  string            `json:"issuer"`
	Subject string            `json:"subject"`
	Claims  map[string]string `json:"claims,omitempty"`
}
