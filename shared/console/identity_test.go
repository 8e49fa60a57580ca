package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// An environment with an identity shows, on its page, the token's file and
// the claims its tokens carry, and never a token.
func TestConsoleIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t, clienttest.WithTemplates("acme", domain.Template{
		Name: "idbox", Command: []string{"sleep", "3600"}, Runtime: domain.RuntimeProcess,
		Timeouts: domain.Timeouts{Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(time.Hour)},
		Quota:    domain.Quota{MaxLeases: 1},
		Identity: &domain.TemplateIdentity{Audiences: []string{domain.AWSAudience}},
	}))
	var r struct {
		Environment struct {
			ID string `json:"id"`
		} `json:"environment"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "idbox", "project": "payments"}, &r)
	id := r.Environment.ID

	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "the environment", chromedp.Navigate(stack.URL+"/#/environments/"+id))
	b.until(t, "the identity read", `document.querySelector('#env-identity [data-claim="sub"]') !== null`)
	b.shot(t, "environment-identity")
	if got := eval[string](t, b, `document.querySelector('#env-identity [data-claim="sub"] code').textContent`); got != "org:acme:template:idbox:project:payments" {
		t.Errorf("sub shown: %q", got)
	}
	if got := eval[string](t, b, `document.querySelector('#env-identity .identity-path').textContent`); got != "/run/envlease/identity/sts.amazonaws.com/token" {
		t.Errorf("file shown: %q", got)
	}
	if text := eval[string](t, b, `document.getElementById('env-identity').textContent`); strings.Contains(text, "eyJ") {
		t.Errorf("the page shows a token: %s", text)
	}
}
