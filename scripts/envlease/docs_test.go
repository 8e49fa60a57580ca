package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var (
	docFence = regexp.MustCompile("^\\s*(```|~~~)")
	docCode  = regexp.MustCompile("`([^`]+)`")
	// An envlease command line: envlease where a shell would run it, then
	// the words that may name a command and its subcommand.
	docCommand = regexp.MustCompile(`(?:^|[\s|;&(]|\$\()envlease((?: [a-z][a-z0-9-]*){1,2})`)
)

// documentedCommands finds every `envlease <command> [<subcommand>]` in the
// code of README.md and docs/*.md: fenced blocks and inline code spans, not
// prose, where "envlease" is the service's name.
func documentedCommands(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	found := map[string][]string{} // command words -> where
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in, shell := false, false
		for n, l := range strings.Split(string(b), "\n") {
			if m := docFence.FindStringSubmatch(l); m != nil {
				in = !in
				// Only shell blocks (or untagged ones) hold command lines;
				// Go code says "envlease" in its comments.
				lang := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), m[1]))
				shell = in && (lang == "" || lang == "sh" || lang == "bash" || lang == "console")
				continue
			}
			var code []string
			if in {
				if !shell {
					continue
				}
				// A shell comment is prose.
				if i := strings.Index(l, "#"); i >= 0 && (i == 0 || l[i-1] == ' ') {
					l = l[:i]
				}
				code = []string{l}
			} else {
				for _, m := range docCode.FindAllStringSubmatch(l, -1) {
					code = append(code, m[1])
				}
			}
			for _, c := range code {
				for _, m := range docCommand.FindAllStringSubmatch(c, -1) {
					words := strings.TrimSpace(m[1])
					where := filepath.Base(f) + ":" + strconv.Itoa(n+1)
					found[words] = append(found[words], where)
				}
			}
		}
	}
	return found
}

// TestDocumentedCommandsExist checks every `envlease <command>` the
// documentation names against the CLI's own command tree: the command
// exists, and a second word naming a subcommand (of a command that has
// subcommands) is one of them.
func TestDocumentedCommandsExist(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }, output: "table"}
	root := a.rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()

	found := documentedCommands(t)
	if len(found) == 0 {
		t.Fatal("no envlease command found in the documentation: the test reads nothing")
	}
	var names []string
	for words := range found {
		names = append(names, words)
	}
	sort.Strings(names)
	for _, words := range names {
		w := strings.Fields(words)
		cmd := sub(root, w[0])
		if cmd == nil {
			t.Errorf("envlease %s (%s): no such command", w[0], strings.Join(found[words], ", "))
			continue
		}
		if len(w) > 1 && cmd.Name() == "help" && sub(root, w[1]) == nil {
			t.Errorf("envlease help %s (%s): no such command or topic", w[1], strings.Join(found[words], ", "))
		}
		if len(w) > 1 && cmd.HasSubCommands() && cmd.Name() != "help" && sub(cmd, w[1]) == nil {
			t.Errorf("envlease %s %s (%s): %s has no such subcommand", w[0], w[1], strings.Join(found[words], ", "), w[0])
		}
	}
	t.Logf("%d distinct command lines checked", len(names))
}

// sub is the subcommand of c called name (or one of its aliases).
func sub(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}

// docInvocation is an envlease command line of the documentation, from its
// "envlease" to the end of the shell command it is in.
var docInvocation = regexp.MustCompile(`(?:^|[\s|;&(]|\$\()envlease((?: [^|;&)#]*)?)`)

// TestDocumentedFlagsExist checks the flags of every envlease command line
// the documentation shows, inline code too: each is a flag of the command
// it is given to (or a global one).
func TestDocumentedFlagsExist(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }, output: "table"}
	root := a.rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	checked := 0
	for _, f := range append([]string{"../../README.md"}, globDocs(t)...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for n, l := range strings.Split(string(b), "\n") {
			var code []string
			for _, m := range docCode.FindAllStringSubmatch(l, -1) {
				code = append(code, m[1])
			}
			if strings.HasPrefix(strings.TrimSpace(l), "envlease ") || strings.HasPrefix(strings.TrimSpace(l), "$ envlease ") {
				code = append(code, l)
			}
			for _, c := range code {
				for _, m := range docInvocation.FindAllStringSubmatch(c, -1) {
					words := strings.Fields(m[1])
					cmd, rest, err := root.Find(words)
					if err != nil || cmd == root {
						continue // TestDocumentedCommandsExist reports those
					}
					for _, w := range rest {
						if w == "--" {
							break
						}
						if !strings.HasPrefix(w, "-") || w == "-" || strings.HasPrefix(w, "-$") {
							continue
						}
						checked++
						if !hasFlag(cmd, w) {
							t.Errorf("%s:%d: envlease %s has no flag %s (in %q)", filepath.Base(f), n+1, cmd.Name(), w, strings.TrimSpace(c))
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no flag found in the documentation: the test reads nothing")
	}
	t.Logf("%d documented flags checked", checked)
}

// hasFlag reports whether cmd takes the flag word w (--name, --name=v, -x,
// -xy for shorthands).
func hasFlag(cmd *cobra.Command, w string) bool {
	flags := cmd.Flags()
	flags.AddFlagSet(cmd.InheritedFlags())
	if name, ok := strings.CutPrefix(w, "--"); ok {
		name, _, _ = strings.Cut(name, "=")
		return flags.Lookup(name) != nil || name == "help"
	}
	for _, r := range strings.TrimPrefix(w, "-") {
		if r == '=' {
			break
		}
		if flags.ShorthandLookup(string(r)) == nil && r != 'h' {
			return false
		}
	}
	return true
}

func globDocs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return files
}
