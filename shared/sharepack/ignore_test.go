package sharepack_test

import (
	"slices"
	"testing"

	"github.com/envlease/envlease/shared/sharepack"
)

// A repository shares as a user means it: .git (every one) and what its
// .gitignore files match stay out, .envleaseignore's lines win over
// .gitignore's, and NoIgnore sends everything.
func TestListHonoursIgnoreFiles(t *testing.T) {
	repo := tree{
		".git/HEAD":              "ref: refs/heads/main",
		".git/objects/ab/cdef":   "blob",
		".gitignore":             "# build output\n*.o\n/bin/\nsecret.env\n",
		".envleaseignore":        "!keep.o\ndocs/drafts/\n",
		"main.go":                "package main",
		"main.o":                 "obj",
		"keep.o":                 "kept by .envleaseignore",
		"bin/tool":               "binary",
		"secret.env":             "TOKEN=x",
		"docs/guide.md":          "guide",
		"docs/drafts/wip.md":     "wip",
		"lib/.gitignore":         "generated.go\n",
		"lib/lib.go":             "package lib",
		"lib/generated.go":       "package lib",
		"lib/bin/ok":             "not the top bin/",
		"vendor/mod/.git/config": "a nested repository",
		"vendor/mod/mod.go":      "package mod",
	}
	dir := repo.make(t, repo.names())
	cases := []struct {
		name string
		o    sharepack.Options
		want []string
	}{
		{"ignore files", sharepack.Options{}, []string{".envleaseignore", ".gitignore", "docs/guide.md", "keep.o", "lib/.gitignore",
			"lib/bin/ok", "lib/lib.go", "main.go", "vendor/mod/mod.go"}},
		{"no ignore", sharepack.Options{NoIgnore: true}, []string{".envleaseignore", ".git/HEAD", ".git/objects/ab/cdef", ".gitignore",
			"bin/tool", "docs/drafts/wip.md", "docs/guide.md", "keep.o", "lib/.gitignore", "lib/bin/ok", "lib/generated.go", "lib/lib.go",
			"main.go", "main.o", "secret.env", "vendor/mod/.git/config", "vendor/mod/mod.go"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := sharepack.List(dir, nil, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Names(); !slices.Equal(got, c.want) {
				t.Fatalf("names\n got %q\nwant %q", got, c.want)
			}
		})
	}
}
