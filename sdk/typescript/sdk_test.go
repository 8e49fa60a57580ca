// Package typescript holds the TypeScript SDK (@envlease/sdk, an npm
// package: package.json, src/, test/); these Go tests are how CI builds
// and tests it, through the README's test command: they install the pinned
// packages with npm ci, build with tsc, check that the generated API types
// are the API description's, and run the SDK's tests and the examples of
// docs/sdk.md with node against the whole stack in process. See docs/sdk.md.
package typescript

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/fixture"
)

// bobToken is the dev server demo's member (scripts/devserver/demo.json),
// whose templates the SDK's tests and the page's examples lease.
const bobToken = "els_dev_bob_0123456789abcdef0123456789abcdef01"

var (
	installOnce sync.Once
	installErr  string
)

// prepare installs the pinned packages (npm ci, when package-lock.json
// changed since the last install) and builds the package and its tests.
// Without node and npm the tests skip, saying what to install.
func prepare(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the TypeScript SDK is built and tested with Node.js 20 or later and npm (Debian: apt-get install nodejs npm)", tool)
		}
	}
	installOnce.Do(func() {
		lock, err := os.ReadFile("package-lock.json")
		if err != nil {
			installErr = err.Error()
			return
		}
		sum := sha256.Sum256(lock)
		want := hex.EncodeToString(sum[:])
		marker := filepath.Join("node_modules", ".envlease-lock-sha256")
		if got, _ := os.ReadFile(marker); string(got) != want {
			if out, err := command("npm", "ci", "--no-audit", "--no-fund").CombinedOutput(); err != nil {
				installErr = "npm ci: " + err.Error() + "\n" + string(out)
				return
			}
			if err := os.WriteFile(marker, []byte(want), 0o644); err != nil {
				installErr = err.Error()
				return
			}
		}
		tsc := filepath.Join("node_modules", "typescript", "bin", "tsc")
		for _, project := range []string{".", "test"} {
			if out, err := command("node", tsc, "-p", project).CombinedOutput(); err != nil {
				installErr = "tsc -p " + project + ": " + err.Error() + "\n" + string(out)
				return
			}
		}
	})
	if installErr != "" {
		t.Fatal(installErr)
	}
}

func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "npm_config_update_notifier=false")
	return cmd
}

// TestGeneratedTypes fails when shared/openapi/openapi.yaml changed and
// src/openapi.ts was not generated again from it (npm run generate).
func TestGeneratedTypes(t *testing.T) {
	prepare(t)
	out := filepath.Join(t.TempDir(), "openapi.ts")
	gen := filepath.Join("node_modules", "openapi-typescript", "bin", "cli.js")
	if b, err := command("node", gen, filepath.Join("..", "..", "shared", "openapi", "openapi.yaml"), "--output", out).CombinedOutput(); err != nil {
		t.Fatalf("openapi-typescript: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("src", "openapi.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("sdk/typescript/src/openapi.ts is not what shared/openapi/openapi.yaml generates: run 'npm run generate' in sdk/typescript and commit it")
	}
}

// stack starts the whole service in process serving the dev server's demo,
// and returns the environment node needs to reach it as bob, and its URL.
func stack(t testing.TB) (env []string, url string) {
	t.Helper()
	demo, err := os.ReadFile(filepath.Join("..", "..", "scripts", "devserver", "demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := fixture.Parse(demo)
	if err != nil {
		t.Fatal(err)
	}
	s := clienttest.Start(t, clienttest.WithFixture(file))
	return append(os.Environ(), "ENVLEASE_URL="+s.URL, "ENVLEASE_TOKEN="+bobToken, "NO_COLOR=1"), s.URL
}

// TestSDK runs the SDK's own tests (test/*.test.ts, node's test runner)
// against the stack, one file at a time: they lease the demo's templates,
// whose quotas are small.
func TestSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the TypeScript SDK's tests against the whole stack")
	}
	prepare(t)
	env, _ := stack(t)
	files, err := filepath.Glob(filepath.Join("dist", "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no built tests in dist/test (%v)", err)
	}
	args := append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, files...)
	cmd := command("node", args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}

// exampleBlock is a ```ts or ```js block of docs/sdk.md: a whole program.
type exampleBlock struct {
	line int
	lang string
	body string
}

// examples reads the runnable blocks of docs/sdk.md.
func examples(t *testing.T) []exampleBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "sdk.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []exampleBlock
	var cur *exampleBlock
	var body strings.Builder
	for n, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		if cur != nil {
			if trimmed == "```" {
				cur.body = body.String()
				out = append(out, *cur)
				cur = nil
				continue
			}
			body.WriteString(l + "\n")
			continue
		}
		if lang, ok := strings.CutPrefix(trimmed, "```"); ok && (lang == "ts" || lang == "js") {
			cur = &exampleBlock{line: n + 1, lang: lang}
			body.Reset()
		}
	}
	return out
}

// TestDocsExamples runs every ```ts and ```js block of docs/sdk.md with node
// against the stack, in page order: each is a whole program, importing
// @envlease/sdk as a reader's would (the package resolves itself by name).
// TypeScript blocks are type-checked and compiled by tsc first, so a page
// that drifts from the SDK fails here.
func TestDocsExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs docs/sdk.md's examples against the whole stack")
	}
	prepare(t)
	blocks := examples(t)
	if len(blocks) == 0 {
		t.Fatal("docs/sdk.md has no ```ts or ```js examples")
	}
	// Inside the package, so that "@envlease/sdk" resolves to it.
	dir := filepath.Join("build", "docs")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := func(b exampleBlock) string { return "sdk_md_line_" + strconv.Itoa(b.line) }
	for _, b := range blocks {
		ext := ".ts"
		if b.lang == "js" {
			ext = ".mjs"
		}
		if err := os.WriteFile(filepath.Join(dir, name(b)+ext), []byte(b.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tsconfig := `{"extends": "../../tsconfig.json", "compilerOptions": {"types": ["node"], "rootDir": ".", "outDir": "out", "declaration": false, "sourceMap": false}, "include": ["*.ts"]}`
	if err := os.WriteFile(filepath.Join(dir, "tsconfig.json"), []byte(tsconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := command("node", filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", dir).CombinedOutput(); err != nil {
		t.Fatalf("the TypeScript examples of docs/sdk.md do not compile (line N is docs/sdk.md's block at line N):\n%s", out)
	}
	env, _ := stack(t)
	api, err := os.ReadFile(filepath.Join("..", "..", "shared", "openapi", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	filesServed := bytes.Contains(api, []byte("\n  /v1/environments/{id}/files:"))
	for _, b := range blocks {
		t.Run("line_"+strconv.Itoa(b.line), func(t *testing.T) {
			if strings.Contains(b.body, "env.files.") && !filesServed {
				// Compiled above all the same: only the run needs the endpoint.
				t.Skip("the API description has no files route (POST /v1/environments/{id}/files), so the stack serves no files")
			}
			file := filepath.Join(dir, name(b)+".mjs")
			if b.lang == "ts" {
				file = filepath.Join(dir, "out", name(b)+".js")
			}
			cmd := command("node", file)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("docs/sdk.md:%d: node: %v\n%s", b.line, err, out)
			}
			t.Logf("docs/sdk.md:%d:\n%s", b.line, out)
		})
	}
}
