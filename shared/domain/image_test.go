package domain_test

import (
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/domain"
)

func TestTemplateRuntimeAndImage(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ref := func(r string) *domain.Image { return &domain.Image{Ref: r} }
	cases := []struct {
		name      string
		t         domain.Template
		field     string // "" = valid
		mentioned string // a word the message must carry
	}{
		{"process by default", domain.Template{}, "", ""},
		{"process named", domain.Template{Runtime: "process"}, "", ""},
		{"container with ref", domain.Template{Runtime: "container", Image: ref("registry.example/team/tool:1.2@" + digest)}, "", ""},
		{"container with tag only", domain.Template{Runtime: "container", Image: ref("busybox:1.36")}, "", ""},
		{"container with artifact", domain.Template{Runtime: "container", Image: &domain.Image{Artifact: "art_01abc"}}, "", ""},
		{"platforms", domain.Template{Platforms: []string{"linux/amd64", "linux/arm64", "linux/arm/v7"}}, "", ""},
		{"unknown runtime", domain.Template{Runtime: "vm"}, "runtime", "container"},
		{"container without image", domain.Template{Runtime: "container"}, "image", "container template needs an image"},
		{"process with image", domain.Template{Image: ref("busybox:1.36")}, "image", "process template"},
		{"empty image", domain.Template{Runtime: "container", Image: &domain.Image{}}, "image", "ref"},
		{"both forms", domain.Template{Runtime: "container", Image: &domain.Image{Ref: "busybox", Artifact: "art_1"}}, "image", "not both"},
		{"bad ref", domain.Template{Runtime: "container", Image: ref("Busy Box!")}, "image.ref", "reference"},
		{"short digest", domain.Template{Runtime: "container", Image: ref("busybox@sha256:abc")}, "image.ref", "reference"},
		{"bad artifact id", domain.Template{Runtime: "container", Image: &domain.Image{Artifact: "a/b"}}, "image.artifact", "artifact id"},
		{"bad platform", domain.Template{Platforms: []string{"amd64"}}, "platforms[0]", "os/arch"},
		{"upper-case platform", domain.Template{Platforms: []string{"linux/amd64", "Linux/ARM64"}}, "platforms[1]", "os/arch"},
		{"too many platforms", domain.Template{Platforms: []string{"linux/a0", "linux/a1", "linux/a2", "linux/a3", "linux/a4", "linux/a5",
			"linux/a6", "linux/a7", "linux/a8", "linux/a9", "linux/b0", "linux/b1", "linux/b2", "linux/b3", "linux/b4", "linux/b5", "linux/b6"}},
			"platforms", "at most 16"},
		{"platform twice", domain.Template{Platforms: []string{"linux/amd64", "linux/amd64"}}, "platforms[1]", "twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.t.ValidateRuntime()
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			de := domain.AsError(err)
			if de == nil || de.Code != domain.CodeInvalid || de.Field != c.field {
				t.Fatalf("got %v, want invalid %s", err, c.field)
			}
			if !strings.Contains(de.Message, c.mentioned) {
				t.Fatalf("message %q does not say %q", de.Message, c.mentioned)
			}
		})
	}
}

func TestPlatformMatches(t *testing.T) {
	cases := []struct {
		want []string
		node string
		ok   bool
	}{
		{nil, "linux/arm64", true},
		{[]string{"linux/amd64"}, "linux/amd64", true},
		{[]string{"linux/amd64"}, "linux/arm64", false},
		{[]string{"linux/amd64", "linux/arm64"}, "linux/arm64", true},
		{[]string{"linux/arm64/v8"}, "linux/arm64", true},
		{[]string{"linux/arm64"}, "linux/arm64/v8", true},
		{[]string{"linux/arm/v7"}, "linux/arm/v6", false},
		{[]string{"linux/amd64"}, "", false},
	}
	for _, c := range cases {
		if got := domain.PlatformMatches(c.want, c.node); got != c.ok {
			t.Errorf("PlatformMatches(%v, %q) = %v, want %v", c.want, c.node, got, c.ok)
		}
	}
}

func TestNeedsAndClasses(t *testing.T) {
	cases := []struct {
		t     domain.Template
		class string
	}{
		{domain.Template{}, ""},
		{domain.Template{Runtime: "process"}, ""},
		{domain.Template{Runtime: "firecracker"}, ""}, // unknown: left to the agent
		{domain.Template{Runtime: "container"}, "container:"},
		{domain.Template{Platforms: []string{"linux/arm64", "linux/amd64"}}, "process:linux/amd64,linux/arm64"},
		{domain.Template{Runtime: "container", Platforms: []string{"linux/arm64"}}, "container:linux/arm64"},
	}
	for _, c := range cases {
		if got := domain.NeedsOf(c.t).Class(); got != c.class {
			t.Errorf("%+v: class %q, want %q", c.t, got, c.class)
		}
	}
	proc := domain.Node{Platform: "linux/amd64", Runtimes: []string{"process"}}
	both := domain.Node{Platform: "linux/arm64", Runtimes: []string{"process", "container"}}
	legacy := domain.Node{}
	for _, c := range []struct {
		n     domain.Node
		needs domain.Needs
		ok    bool
	}{
		{proc, domain.Needs{}, true},
		{proc, domain.Needs{Runtime: "container"}, false},
		{proc, domain.Needs{Platforms: []string{"linux/arm64"}}, false},
		{both, domain.Needs{Runtime: "container", Platforms: []string{"linux/amd64", "linux/arm64"}}, true},
		{legacy, domain.Needs{Platforms: []string{"linux/arm64"}}, true},
		{legacy, domain.Needs{Runtime: "container"}, false},
	} {
		if got := c.n.Runs(c.needs); got != c.ok {
			t.Errorf("%s runs %s: %v, want %v", c.n.Offers(), c.needs, got, c.ok)
		}
	}
}
