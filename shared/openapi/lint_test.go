package openapi_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// lintDir holds the pinned linter (package.json, package-lock.json) and its
// configuration (redocly.yaml, .redocly.lint-ignore.yaml).
const lintDir = "../../tools/openapi-lint"

// TestLint is how CI lints the API description: it installs the linter pinned
// in package-lock.json when it is missing or another version, then runs
// `redocly lint` with the committed configuration, which fails on any error
// or warning. Without npm the test fails, saying so: a lint that silently
// does not run looks like one that passed.
func TestLint(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is not on PATH: the API description is linted by @redocly/cli (pinned in %s/package.json); install Node.js 20.19+ with npm and run go test again", lintDir)
	}
	dir, err := filepath.Abs(lintDir)
	if err != nil {
		t.Fatal(err)
	}
	if want, got := pinned(t, dir), installed(dir); got != want {
		t.Logf("installing @redocly/cli %s (found %q) with npm ci in %s", want, got, lintDir)
		run(t, dir, npm, "ci", "--no-audit", "--no-fund")
	}
	cli := filepath.Join(dir, "node_modules", "@redocly", "cli", "bin", "cli.js")
	out := run(t, dir, "node", cli, "lint", "--config", "redocly.yaml", "--format", "codeframe",
		filepath.Join("..", "..", "shared", "openapi", "openapi.yaml"))
	if !strings.Contains(out, "Your API description is valid") {
		t.Fatalf("redocly lint did not report a valid description:\n%s", out)
	}
}

func pinned(t *testing.T, dir string) string {
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	v := pkg.DevDependencies["@redocly/cli"]
	if v == "" || strings.ContainsAny(v, "^~<>*x ") {
		t.Fatalf("@redocly/cli must be pinned to an exact version in package.json, got %q", v)
	}
	return v
}

func installed(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "@redocly", "cli", "package.json"))
	if err != nil {
		return ""
	}
	var pkg struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &pkg)
	return pkg.Version
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// No usage reports and no update checks: the lint must not depend on
	// anything but the installed package.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
