package domain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// A template's identity is bounded: audiences (count, size, characters,
// folders of their own) and lifetime; a 422 names the entry.
func TestTemplateIdentityIsValidated(t *testing.T) {
	many := make([]string, domain.MaxIdentityAudiences+1)
	for i := range many {
		many[i] = "aud" + string(rune('a'+i))
	}
	for _, c := range []struct {
		name     string
		identity domain.TemplateIdentity
		field    string // "" when valid
	}{
		{"aws", domain.TemplateIdentity{Audiences: []string{"sts.amazonaws.com"}}, ""},
		{"gcp and lifetime", domain.TemplateIdentity{Audiences: []string{"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/e"},
			Lifetime: domain.Duration(2 * time.Hour)}, ""},
		{"most", domain.TemplateIdentity{Audiences: many[:domain.MaxIdentityAudiences]}, ""},
		{"none", domain.TemplateIdentity{}, "identity.audiences"},
		{"too many", domain.TemplateIdentity{Audiences: many}, "identity.audiences"},
		{"empty", domain.TemplateIdentity{Audiences: []string{"a", ""}}, "identity.audiences[1]"},
		{"space", domain.TemplateIdentity{Audiences: []string{"a b"}}, "identity.audiences[0]"},
		{"control", domain.TemplateIdentity{Audiences: []string{"a\x01"}}, "identity.audiences[0]"},
		{"long", domain.TemplateIdentity{Audiences: []string{strings.Repeat("a", domain.MaxIdentityAudience+1)}}, "identity.audiences[0]"},
		{"same folder", domain.TemplateIdentity{Audiences: []string{"a/b", "a:b"}}, "identity.audiences[1]"},
		{"short life", domain.TemplateIdentity{Audiences: []string{"a"}, Lifetime: domain.Duration(time.Minute)}, "identity.lifetime"},
		{"long life", domain.TemplateIdentity{Audiences: []string{"a"}, Lifetime: domain.Duration(13 * time.Hour)}, "identity.lifetime"},
	} {
		id := c.identity
		err := domain.Template{Name: "ci", Identity: &id}.ValidateLimits()
		var de *domain.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &de) || de.Code != domain.CodeInvalid || de.Field != c.field || !strings.Contains(de.Message, c.field)):
			t.Errorf("%s: %v, want a 422 naming %s", c.name, err, c.field)
		}
	}
}

func TestAudienceFolder(t *testing.T) {
	for aud, want := range map[string]string{
		"sts.amazonaws.com":                           "sts.amazonaws.com",
		"//iam.googleapis.com/projects/1/providers/x": "__iam.googleapis.com_projects_1_providers_x",
		"..":  "__",
		".":   "_",
		"a:b": "a_b",
	} {
		if got := domain.AudienceFolder(aud); got != want {
			t.Errorf("AudienceFolder(%q) = %q, want %q", aud, got, want)
		}
	}
}
