package environments_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// A container template whose image is an artifact is leased only while the
// artifact is a sealed, unexpired artifact of the organization.
func TestLeaseChecksTheImageArtifact(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	past := apitest.Start.Add(-time.Hour)
	later := apitest.Start.Add(time.Hour)
	for _, a := range []domain.Artifact{
		{OrgID: "acme", ID: "art_image", State: domain.ArtifactSealed, ContentType: domain.ImageLayoutContentType, Created: past, Expires: later},
		{OrgID: "acme", ID: "art_expired", State: domain.ArtifactSealed, Created: past.Add(-time.Hour), Expires: past},
		{OrgID: "acme", ID: "art_open", State: domain.ArtifactOpen, Created: past, Expires: later},
		{OrgID: "globex", ID: "art_globex", State: domain.ArtifactSealed, Created: past, Expires: later},
	} {
		if err := e.Store.PutArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	put := func(name string, im domain.Image) {
		tpl := domain.Template{Name: name, Command: []string{"sleep", "60"}, Runtime: domain.RuntimeContainer, Image: &im,
			Pools: []string{"local"}, Timeouts: domain.Timeouts{Idle: domain.Duration(time.Minute), Hard: domain.Duration(time.Hour)},
			Quota: domain.Quota{MaxLeases: 5}}
		if err := e.Store.PutTemplate(ctx, "acme", tpl); err != nil {
			t.Fatal(err)
		}
	}
	put("boxed", domain.Image{Artifact: "art_image"})
	put("pulled", domain.Image{Ref: "registry.example/tool:1"})
	put("boxed-expired", domain.Image{Artifact: "art_expired"})
	put("boxed-open", domain.Image{Artifact: "art_open"})
	put("boxed-unknown", domain.Image{Artifact: "art_nope"})
	put("boxed-globex", domain.Image{Artifact: "art_globex"})

	for _, name := range []string{"boxed", "pulled"} {
		lease(t, e, apitest.AliceToken, map[string]any{"template": name})
	}
	for _, c := range []struct{ template, says string }{
		{"boxed-expired", "not a sealed, unexpired artifact"},
		{"boxed-open", "not a sealed, unexpired artifact"},
		{"boxed-unknown", "not an artifact of your organization"},
		{"boxed-globex", "not an artifact of your organization"},
	} {
		r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, map[string]any{"template": c.template})
		var b struct{ Error, Code, Field string }
		r.JSON(t, &b)
		if r.Status != 422 || b.Field != "template" || !strings.Contains(b.Error, "image.artifact") || !strings.Contains(b.Error, c.says) {
			t.Errorf("%s: %d %s", c.template, r.Status, r.Body)
		}
	}
}
