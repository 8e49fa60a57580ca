package main

// The documentation's examples are run as a person pastes them: every
// fenced sh or console block of README.md and docs/*.md, in page order, by
// sh, against the whole stack in process (shared/clienttest) serving the dev
// server's demo. A console block's "$ " lines are commands and the lines
// after each are what it prints (standard output and error, as a terminal
// shows them), checked with "…" standing for any text within a line, or
// for any lines when alone on one. Why sh and not testscript: the examples
// are shell (pipes, $(...), quoting); their mistakes are shell mistakes, such
// as a variable the local shell expands before envlease sets it, which only
// a real shell makes.
//
// Each page runs in one shell, with a stack, a home folder and a project
// folder of its own, logged in as the demo's admin alice first, as a reader
// who followed the quick start would be. The examples' few fixed words are
// rewritten where the test's stack differs from a person's: the dev
// server's address becomes the stack's; `go run ./scripts/devserver` is the
// stack already running; `go install ./scripts/envlease` and `go run
// ./scripts/envlease` are the binary this test built, and $(go env
// GOPATH)/bin the folder it is in.
//
// A block preceded by a line "_Not run by the docs test: WHY._", a page with
// a line "_The commands on this page are not run by the docs test: WHY._",
// and a line ending in a comment "(not run: WHY)" are left out, visibly.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/fixture"
)

var (
	docFenceLine = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([^\\s{]*)")
	blockSkip    = regexp.MustCompile(`^_Not run by the docs test: .+_$`)
	pageSkip     = regexp.MustCompile(`^_The commands on this page are not run by the docs test: .+_$`)
	lineSkip     = regexp.MustCompile(`#.*\(not run: [^)]+\)\s*$`)
)

// docBlock is a fenced block of a page.
type docBlock struct {
	file string
	line int // of the opening fence
	lang string
	body []string
	skip bool
}

// runnable reports whether a block holds commands a person types.
func (b docBlock) runnable() bool { return b.lang == "sh" || b.lang == "bash" || b.lang == "console" }

// docBlocks reads the fenced blocks of a page, and whether the page as a
// whole is marked not run.
func docBlocks(t *testing.T, file string) ([]docBlock, bool) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	var cur *docBlock
	var indent, fence, prev string
	pageSkipped := false
	for n, l := range strings.Split(string(b), "\n") {
		if cur != nil {
			if strings.HasPrefix(strings.TrimSpace(l), fence) && strings.TrimSpace(l) == fence {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.body = append(cur.body, strings.TrimPrefix(l, indent))
			continue
		}
		if m := docFenceLine.FindStringSubmatch(l); m != nil {
			indent, fence = m[1], m[2]
			cur = &docBlock{file: file, line: n + 1, lang: m[3], skip: blockSkip.MatchString(prev)}
			continue
		}
		if pageSkip.MatchString(strings.TrimSpace(l)) {
			pageSkipped = true
		}
		if strings.TrimSpace(l) != "" {
			prev = strings.TrimSpace(l)
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: the block is never closed", file, cur.line)
	}
	return blocks, pageSkipped
}

// docPages are README.md and docs/*.md.
func docPages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

// Every block says what it is: a person cannot tell an untagged block of
// commands from one of output, and neither can this test.
func TestDocBlocksAreTagged(t *testing.T) {
	for _, f := range docPages(t) {
		blocks, _ := docBlocks(t, f)
		for _, b := range blocks {
			if b.lang == "" {
				t.Errorf("%s:%d: an untagged block: tag it sh (commands), console ($ commands and their output) or text", f, b.line)
			}
		}
	}
}

func TestDocsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documentation's examples against the whole stack")
	}
	// The examples use what a reader's shell has at hand; a missing one
	// fails here, saying what to install, rather than in the middle of a page.
	for _, tool := range []string{"sh", "curl", "jq", "make", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the documentation's examples use %s, which is not on PATH: install it (Debian: apt-get install %s)", tool, tool)
		}
	}
	demo, err := os.ReadFile("../devserver/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range docPages(t) {
		blocks, pageSkipped := docBlocks(t, f)
		var run []docBlock
		for _, b := range blocks {
			if b.runnable() && !b.skip && !pageSkipped {
				run = append(run, b)
			}
		}
		if len(run) == 0 {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			file, err := fixture.Parse(demo)
			if err != nil {
				t.Fatal(err)
			}
			s := clienttest.Start(t, clienttest.WithFixture(file))
			runPage(t, s, run)
		})
	}
}

// runPage runs a page's blocks in one shell and checks what the console
// blocks show.
func runPage(t *testing.T, s *clienttest.Stack, blocks []docBlock) {
	home := t.TempDir()
	work := filepath.Join(home, "project")
	outDir := filepath.Join(home, ".docs-test")
	// The reader's project: a repository with a Makefile whose tests reach
	// the environment, as the examples' "make integration-test" expects.
	for name, content := range map[string]string{
		"Makefile":    "integration-test:\n\tcurl -fsS \"http://$$ENVLEASE_WEB/src/README.md\" >/dev/null && echo integration tests passed\n",
		"README.md":   "# project\n",
		"index.html":  "<p>hello from the project</p>\n",
		".gitignore":  "build/\n",
		"build/out.o": "ignored",
		".git/HEAD":   "ref: refs/heads/main\n",
	} {
		p := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Dir(binary)
	u := &user{t: t, url: s.URL, home: home}
	u.login(clienttest.AliceToken)

	var script strings.Builder
	script.WriteString("set -e\n")
	type check struct {
		block docBlock
		cmd   string
		want  []string
		n     int
	}
	var checks []check
	for _, b := range blocks {
		fmt.Fprintf(&script, "echo '== %s:%d' >&2\n", filepath.Base(b.file), b.line)
		if b.lang != "console" {
			for _, l := range b.body {
				script.WriteString(rewrite(l, s.URL, bin) + "\n")
			}
			continue
		}
		for _, c := range consoleCommands(b) {
			n := len(checks)
			checks = append(checks, check{block: b, cmd: c.cmd, want: c.want, n: n})
			// The command runs in this shell (its variables stay), its
			// output and status kept for the check.
			fmt.Fprintf(&script, "{ %s\n} >%s/%d 2>&1 && echo 0 >%s/%d.code || echo $? >%s/%d.code\n",
				rewrite(c.cmd, s.URL, bin), outDir, n, outDir, n, outDir, n)
		}
	}
	// What the page left running in the background ends with it.
	script.WriteString("kill $(jobs -p) 2>/dev/null || true\n")

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script.String())
	cmd.Dir = work
	cmd.Env = []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"ENVLEASE_SERVER_WAIT=0",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything left behind
	}
	if err != nil {
		t.Fatalf("the page's commands failed (%v); the last '==' line names the block:\n%s", err, out)
	}
	for _, c := range checks {
		where := fmt.Sprintf("%s:%d: $ %s", filepath.Base(c.block.file), c.block.line, c.cmd)
		got, err := os.ReadFile(filepath.Join(outDir, strconv.Itoa(c.n)))
		if err != nil {
			t.Errorf("%s: never ran (%v)\n%s", where, err, out)
			continue
		}
		codeB, _ := os.ReadFile(filepath.Join(outDir, strconv.Itoa(c.n)+".code"))
		code, _ := strconv.Atoi(strings.TrimSpace(string(codeB)))
		text := unrewrite(string(got), s.URL)
		// A command the page shows failing shows its error; any other
		// must succeed. One started in the background has succeeded when
		// it started, whatever it prints when it ends.
		showsError := false
		for _, w := range c.want {
			if strings.HasPrefix(w, "envlease: ") && !strings.HasSuffix(strings.TrimSpace(c.cmd), "&") {
				showsError = true
			}
		}
		if (code != 0) != showsError {
			t.Errorf("%s: exit %d\n%s", where, code, text)
			continue
		}
		if !outputMatches(c.want, splitLines(text)) {
			t.Errorf("%s: the page shows\n%s\nthe command printed\n%s", where, strings.Join(c.want, "\n"), text)
		}
	}
}

// consoleCommand is a "$ " command of a console block and the lines it
// shows after it.
type consoleCommand struct {
	cmd  string
	want []string
}

func consoleCommands(b docBlock) []consoleCommand {
	var out []consoleCommand
	cont := false
	for _, l := range b.body {
		switch {
		case cont:
			out[len(out)-1].cmd += "\n" + l
		case strings.HasPrefix(l, "$ "):
			out = append(out, consoleCommand{cmd: strings.TrimPrefix(l, "$ ")})
		case len(out) > 0:
			out[len(out)-1].want = append(out[len(out)-1].want, l)
		}
		cont = len(out) > 0 && strings.HasSuffix(l, "\\") && (cont || strings.HasPrefix(l, "$ "))
	}
	for i := range out {
		for len(out[i].want) > 0 && strings.TrimSpace(out[i].want[len(out[i].want)-1]) == "" {
			out[i].want = out[i].want[:len(out[i].want)-1]
		}
	}
	return out
}

var (
	devserverLine = regexp.MustCompile(`^\s*go run \./scripts/devserver\b.*$`)
	installLine   = regexp.MustCompile(`^\s*go install \./scripts/envlease\b.*$`)
	goRunCLI      = regexp.MustCompile(`\bgo run \./scripts/envlease\b`)
	devAddr       = regexp.MustCompile(`https?://127\.0\.0\.1:8080`)
)

// rewrite makes a line of the documentation run against the test's stack.
func rewrite(l, stackURL, bin string) string {
	switch {
	case lineSkip.MatchString(l):
		return ": " + shellQuote(strings.TrimSpace(l))
	case devserverLine.MatchString(l):
		return ": the dev server is the stack of the test"
	case installLine.MatchString(l):
		return ": envlease is the binary the test built"
	}
	l = goRunCLI.ReplaceAllString(l, "envlease")
	l = strings.ReplaceAll(l, "$(go env GOPATH)/bin", bin)
	return devAddr.ReplaceAllString(l, stackURL)
}

// unrewrite puts the dev server's address back into what a command printed.
func unrewrite(s, stackURL string) string {
	s = strings.ReplaceAll(s, stackURL, "http://127.0.0.1:8080")
	return strings.ReplaceAll(s, strings.TrimPrefix(stackURL, "http://"), "127.0.0.1:8080")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func splitLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	return out
}

// outputMatches matches printed lines against shown ones: "…" in a line is
// any text, a line of "…" alone any lines; runs of spaces count as one.
func outputMatches(want, got []string) bool {
	if len(want) == 0 {
		return true // a command shown without its output
	}
	return matchLines(want, got)
}

func matchLines(want, got []string) bool {
	switch {
	case len(want) == 0:
		return len(got) == 0
	case strings.TrimSpace(want[0]) == "…":
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	case len(got) == 0 || !lineMatches(want[0], got[0]):
		return false
	}
	return matchLines(want[1:], got[1:])
}

// spaces are runs of blanks: a table's column widths follow its data, so
// they count as one space.
var spaces = regexp.MustCompile(`[ \t]+`)

func lineMatches(want, got string) bool {
	want = spaces.ReplaceAllString(strings.TrimSpace(want), " ")
	got = spaces.ReplaceAllString(strings.TrimSpace(got), " ")
	parts := strings.Split(want, "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re, err := regexp.Compile("^" + strings.Join(parts, ".*") + "$")
	return err == nil && re.MatchString(got)
}
