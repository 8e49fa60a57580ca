package identity

import (
	"testing"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// A token lives its lifetime, but never past its environment's hard end.
func TestTokensEndByTheirLease(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	id := &domain.TemplateIdentity{Audiences: []string{"sts.amazonaws.com"}, Lifetime: domain.Duration(2 * time.Hour)}
	for _, tc := range []struct {
		name    string
		expires time.Time
		want    time.Time
	}{
		{"lease outlives the token", now.Add(6 * time.Hour), now.Add(2 * time.Hour)},
		{"lease ends first", now.Add(30 * time.Minute), now.Add(30 * time.Minute)},
		{"lease ends within the second", now.Add(1500 * time.Millisecond), now.Add(time.Second)},
	} {
		e := domain.Environment{ID: "env_1", OrgID: "acme", Template: "shell", Expires: tc.expires, Identity: id}
		c := ClaimsFor("https://issuer.example", e, "sts.amazonaws.com", now, "j")
		if got := c.Expiry.Time().UTC(); !got.Equal(tc.want) {
			t.Errorf("%s: exp %s, want %s", tc.name, got, tc.want)
		}
	}
}
