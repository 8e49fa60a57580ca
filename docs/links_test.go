// Package docs holds the documentation pages; its test checks that every
// relative link in README.md and docs/*.md leads somewhere: the file exists
// and, when the link names an anchor, a heading of that page makes it.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// pages are the Markdown files whose links are checked, relative to the
// repository root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, filepath.Join("docs", d))
	}
	return out
}

// root is the repository root, seen from this package's folder.
const root = ".."

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	// [text](target) and ![alt](target); a target has no spaces.
	link    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// prose gives a page's lines outside fenced code blocks, with inline code
// spans blanked, so that code is never read as links or headings.
func prose(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		out = append(out, l)
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation and
// symbols dropped (letters, digits, marks, spaces, '-' and '_' kept), spaces
// made '-'. Formatting (code, emphasis, links) counts only by its text.
func slug(h string) string {
	h = link.ReplaceAllStringFunc(h, func(s string) string {
		return s[strings.Index(s, "[")+1 : strings.LastIndex(s, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a page's headings; a repeated heading gets
// "-1", "-2", … as on GitHub.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose(text) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"The agent's checks", "the-agents-checks"},
		{"`GET /v1/whoami`", "get-v1whoami"},
		{"Confinement (the agent runs as root, Linux)", "confinement-the-agent-runs-as-root-linux"},
		{"Changes still needed at 10×", "changes-still-needed-at-10"},
		{"Tunnels and `envlease port-forward`", "tunnels-and-envlease-port-forward"},
		{"Limits at DynamoDB's edges", "limits-at-dynamodbs-edges"},
		{"Nodes: what an environment can reach", "nodes-what-an-environment-can-reach"},
		{"[Scale](scale.md) notes", "scale-notes"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// TestRelativeLinksResolve follows every relative link of README.md and
// docs/*.md: the file (or folder) must exist, and an anchor must be one a
// heading of the target page makes.
func TestRelativeLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	checked := 0
	for _, page := range pages(t) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for n, l := range prose(string(b)) {
			l = inlineCode.ReplaceAllString(l, "")
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				path := filepath.Join(root, page) // a bare #anchor is on this page
				if file != "" {
					path = filepath.Join(root, filepath.Dir(page), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s (prose line %d): link %q: no such file", page, n+1, target)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s: link %q: an anchor into a file that is not Markdown", page, target)
					continue
				}
				a, err := anchorsOf(path)
				if err != nil {
					t.Fatal(err)
				}
				if !a[anchor] {
					t.Errorf("%s (prose line %d): link %q: %s has no heading with that anchor", page, n+1, target, file)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the test reads nothing")
	}
	t.Logf("%d relative links checked", checked)
}

// TestEveryPageIsInTheMap keeps the README's map of the documentation
// whole: every docs/*.md page is linked from README.md.
func TestEveryPageIsInTheMap(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages(t)[1:] {
		if !strings.Contains(string(b), "]("+filepath.ToSlash(page)+")") {
			t.Errorf("README.md does not link %s", page)
		}
	}
}
