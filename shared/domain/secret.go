package domain

import (
	"fmt"
	"net/textproto"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Secret is an organization secret as the API shows it: never its value,
// which only the network boundary of an environment whose template binds
// it ever holds in plain (docs/secrets.md).
type Secret struct {
	Name string `json:"name"`
	// SetBy is who set its current value (a person's id, or key:<id>);
	// Set is when.
	SetBy string    `json:"setBy"`
	Set   time.Time `json:"set"`
	// Templates are the templates that bind it, in name order.
	Templates []string `json:"templates"`
	// Size is the value's length in bytes (a stored value can be told
	// from an empty paste without showing it).
	Size int `json:"size"`

	OrgID string `json:"-"`
}

// SealedSecret is a secret as stored: its value encrypted under a data key,
// the data key itself encrypted by the key service (KMS in AWS, the dev
// server's key locally). Nothing of it is the value in plain.
type SealedSecret struct {
	OrgID, Name string
	SetBy       string
	Set         time.Time
	Size        int
	// KeyID names the key that sealed DataKey (a KMS key ARN, or "local").
	KeyID string
	// DataKey is the data key, encrypted by KeyID; Nonce and Ciphertext
	// the value under AES-GCM with the data key, the organization and name
	// as associated data.
	DataKey, Nonce, Ciphertext []byte
}

// Events of secrets: set (first or again) and deleted. Their data names the
// secret and its size, never the value.
const (
	EventSecretSet     = "secret.set"
	EventSecretDeleted = "secret.deleted"
)

// Scopes of secrets: reading their names (never values) and setting or
// deleting them (an admin's).
const (
	ScopeSecretsRead  = "secrets:read"
	ScopeSecretsWrite = "secrets:write"
)

// Limits of secrets.
const (
	MaxSecretValue = 16 << 10
	MaxSecrets     = 100
	// MaxTemplateSecrets bounds a template's bindings, MaxBindingHosts
	// the hosts of one.
	MaxTemplateSecrets = 16
	MaxBindingHosts    = 16
)

// secretName is an environment-variable-like name: GITHUB_TOKEN.
var secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidateSecretName checks a secret's name (422 naming the problem).
func ValidateSecretName(name string) error {
	if !secretName.MatchString(name) {
		return Invalid("name", "a secret's name is 1-64 letters, digits and _, not starting with a digit (GITHUB_TOKEN); got %q", name)
	}
	return nil
}

// ValidateSecretValue checks a secret's value: it goes into an HTTP header,
// so it is 1-16 KiB of UTF-8 without control characters (a trailing
// newline, as a file or `echo` leaves it, is for the caller to trim).
func ValidateSecretValue(v []byte) error {
	switch {
	case len(v) == 0:
		return Invalid("value", "the secret's value is empty")
	case len(v) > MaxSecretValue:
		return Invalid("value", "the secret's value is %d bytes, at most %d", len(v), MaxSecretValue)
	case !utf8.Valid(v):
		return Invalid("value", "the secret's value is not UTF-8 text")
	}
	for i, c := range string(v) {
		if c < 0x20 || c == 0x7f {
			return Invalid("value", "the secret's value has a control character (%U) at byte %d: a header cannot carry it", c, i)
		}
	}
	return nil
}

// SecretBinding is one secret of a template, added by the network boundary
// to the requests its environments make to Hosts (docs/secrets.md): as a
// header whose value has {secret} where the secret goes, or as HTTP basic
// authentication.
type SecretBinding struct {
	Secret string   `json:"secret"`
	Hosts  []string `json:"hosts"`
	// Header is "Name: value with {secret}", for example
	// "Authorization: Bearer {secret}".
	Header string `json:"header,omitempty"`
	// BasicAuth answers the hosts' basic-auth challenge with User and the
	// secret as password (sent with every request, so the challenge is
	// answered before it is made).
	BasicAuth *BasicAuth `json:"basicAuth,omitempty"`
}

// BasicAuth is the basic-auth form of a binding.
type BasicAuth struct {
	User string `json:"user"`
}

// hostName is a DNS name the boundary matches exactly (lower case).
var hostName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// HeaderParts splits a binding's Header into its name and value template.
func (b SecretBinding) HeaderParts() (name, value string) {
	n, v, _ := strings.Cut(b.Header, ":")
	return textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(n)), strings.TrimSpace(v)
}

// ValidateSecretBindings checks a template's bindings, naming the first bad
// one as secrets[i].field. The secrets themselves are looked up when an
// environment is leased (they may be set after the template is applied).
func ValidateSecretBindings(template string, bs []SecretBinding) error {
	if len(bs) > MaxTemplateSecrets {
		return Invalid("secrets", "a template binds at most %d secrets, %s binds %d", MaxTemplateSecrets, template, len(bs))
	}
	for i, b := range bs {
		f := func(s string) string { return fmt.Sprintf("secrets[%d].%s", i, s) }
		if !secretName.MatchString(b.Secret) {
			return Invalid(f("secret"), "%s: %q is not a secret's name (letters, digits and _)", template, b.Secret)
		}
		if len(b.Hosts) == 0 || len(b.Hosts) > MaxBindingHosts {
			return Invalid(f("hosts"), "%s: a binding names 1 to %d hosts", template, MaxBindingHosts)
		}
		for j, h := range b.Hosts {
			if h != strings.ToLower(h) || len(h) > 253 || !hostName.MatchString(h) || !strings.Contains(h, ".") {
				return Invalid(fmt.Sprintf("secrets[%d].hosts[%d]", i, j), "%s: %q is not a host name in lower case (api.github.com); addresses and wildcards are not bound", template, h)
			}
		}
		switch {
		case b.Header != "" && b.BasicAuth != nil:
			return Invalid(f("header"), "%s: a binding has a header or basicAuth, not both", template)
		case b.Header != "":
			name, value := b.HeaderParts()
			if !strings.Contains(b.Header, ":") || name == "" || !httpToken(name) {
				return Invalid(f("header"), "%s: header is \"Name: value with {secret}\", got %q", template, b.Header)
			}
			if strings.Count(value, "{secret}") != 1 {
				return Invalid(f("header"), "%s: the header's value must hold {secret} once, got %q", template, value)
			}
			if strings.EqualFold(name, "Host") || strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding") || strings.EqualFold(name, "Connection") {
				return Invalid(f("header"), "%s: the boundary does not set %s", template, name)
			}
			if ValidateSecretValue([]byte(strings.Replace(value, "{secret}", "x", 1))) != nil {
				return Invalid(f("header"), "%s: the header's value has a control character", template)
			}
		case b.BasicAuth != nil:
			if b.BasicAuth.User == "" || len(b.BasicAuth.User) > 256 || strings.Contains(b.BasicAuth.User, ":") || ValidateSecretValue([]byte(b.BasicAuth.User)) != nil {
				return Invalid(f("basicAuth.user"), "%s: basicAuth.user is 1-256 characters without ':' or control characters", template)
			}
		default:
			return Invalid(f("header"), "%s: a binding adds a header (\"Authorization: Bearer {secret}\") or basicAuth ({\"user\": ...})", template)
		}
		for k := range i {
			for _, h := range b.Hosts {
				for _, h2 := range bs[k].Hosts {
					if h == h2 && sameTarget(b, bs[k]) {
						return Invalid(f("hosts"), "%s: %s is bound twice to the same header", template, h)
					}
				}
			}
		}
	}
	return nil
}

// sameTarget says whether two bindings would set the same header.
func sameTarget(a, b SecretBinding) bool {
	an, bn := "Authorization", "Authorization"
	if a.Header != "" {
		an, _ = a.HeaderParts()
	}
	if b.Header != "" {
		bn, _ = b.HeaderParts()
	}
	return an == bn
}

func httpToken(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// SecretNames are the names of the secrets t binds, without repeats.
func (t Template) SecretNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, b := range t.Secrets {
		if !seen[b.Secret] {
			seen[b.Secret] = true
			out = append(out, b.Secret)
		}
	}
	return out
}
