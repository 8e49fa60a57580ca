package domain

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// TemplateIdentity asks that a template's environments carry an identity:
// a short-lived OIDC token that envlease signs as an issuer, one per
// audience, found in a file inside the environment and refreshed before it
// expires (docs/identity.md).
type TemplateIdentity struct {
	// Audiences are the tokens' aud claims, one token each (a cloud's STS:
	// "sts.amazonaws.com"; a GCP workload identity provider's name).
	Audiences []string `json:"audiences"`
	// Lifetime is each token's life (IdentityDefaultLifetime when empty).
	Lifetime Duration `json:"lifetime,omitempty"`
}

// Bounds of a template's identity. The longest lifetime is also how long a
// retired signing key stays published (identity.Keyring): every token it
// signed has expired by then.
const (
	MaxIdentityAudiences    = 8
	MaxIdentityAudience     = 255
	MinIdentityLifetime     = 10 * time.Minute
	MaxIdentityLifetime     = 12 * time.Hour
	IdentityDefaultLifetime = time.Hour
)

// LifetimeOrDefault is the life of each token.
func (i TemplateIdentity) LifetimeOrDefault() time.Duration {
	if i.Lifetime == 0 {
		return IdentityDefaultLifetime
	}
	return i.Lifetime.Std()
}

// Validate checks the audiences and the lifetime; a 422 names the entry.
func (i TemplateIdentity) Validate(template string) error {
	if len(i.Audiences) == 0 {
		return Invalid("identity.audiences", "identity.audiences of %s: at least one audience", template)
	}
	if len(i.Audiences) > MaxIdentityAudiences {
		return Invalid("identity.audiences", "identity.audiences of %s: at most %d audiences, it has %d", template, MaxIdentityAudiences, len(i.Audiences))
	}
	folders := map[string]string{}
	for n, a := range i.Audiences {
		field := fmt.Sprintf("identity.audiences[%d]", n)
		if a == "" || len(a) > MaxIdentityAudience || !utf8.ValidString(a) || strings.TrimSpace(a) != a {
			return Invalid(field, "%s of %s: audience %q must be 1-%d bytes of UTF-8 without surrounding spaces", field, template, a, MaxIdentityAudience)
		}
		for _, r := range a {
			if unicode.IsControl(r) || unicode.IsSpace(r) {
				return Invalid(field, "%s of %s: audience %q has a space or a control character", field, template, a)
			}
		}
		f := AudienceFolder(a)
		if other, ok := folders[f]; ok {
			return Invalid(field, "%s of %s: audiences %q and %q would share the token folder %s", field, template, other, a, f)
		}
		folders[f] = a
	}
	if i.Lifetime != 0 && (i.Lifetime.Std() < MinIdentityLifetime || i.Lifetime.Std() > MaxIdentityLifetime) {
		return Invalid("identity.lifetime", "identity.lifetime of %s: %s must be from %s to %s", template, i.Lifetime,
			Duration(MinIdentityLifetime), Duration(MaxIdentityLifetime))
	}
	return nil
}

// IdentityPath is the folder inside an environment that holds its tokens:
// IdentityPath/<AudienceFolder(aud)>/token. A process environment finds it
// under its own folder ($ENVLEASE_ROOT/run/envlease/identity).
const IdentityPath = "/run/envlease/identity"

// AudienceFolder is the folder name of an audience's token: the audience
// with every byte outside [A-Za-z0-9._-] made "_", so "sts.amazonaws.com"
// stays itself and a GCP provider's //iam.googleapis.com/... becomes one
// name. "." and ".." become "_" and "__".
func AudienceFolder(aud string) string {
	b := []byte(aud)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	s := string(b)
	switch s {
	case ".":
		return "_"
	case "..":
		return "__"
	}
	return s
}

// AWSAudience is the audience AWS STS expects of a web identity token; the
// first such audience of a template is also named by
// AWS_WEB_IDENTITY_TOKEN_FILE.
const AWSAudience = "sts.amazonaws.com"
