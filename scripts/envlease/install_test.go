package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// The way docs/ci.md installs a pinned CLI works: `go install
// github.com/envlease/envlease/scripts/envlease@<version>` builds it from
// the module as a proxy serves it (go.mod may hold no replace or exclude
// directives for that, and the module must carry every file the CLI
// builds from). The module is served from a file proxy made of this
// checkout, as the public proxy would serve a commit of it; the
// dependencies come from the module cache.
func TestInstallPinnedCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI from a module zip")
	}
	const (
		path    = "github.com/envlease/envlease"
		version = "v0.0.0-20261128000000-0123456789ab" // a commit's pseudo-version
	)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	dir := filepath.Join(proxy, path, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("list", []byte(version+"\n"))
	write(version+".info", []byte(`{"Version":"`+version+`","Time":"2026-11-28T00:00:00Z"}`))
	write(version+".mod", gomod)
	// Only what git tracks at HEAD goes in, as in the proxy's zip of a
	// commit (git archive also reads a worktree, which zip's own VCS
	// reader does not).
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", root, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	var z bytes.Buffer
	if err := zip.CreateFromDir(&z, module.Version{Path: path, Version: version}, src); err != nil {
		t.Fatalf("the module as a proxy would zip it: %v", err)
	}
	write(version+".zip", z.Bytes())

	gobin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", path+"/scripts/envlease@"+version)
	cmd.Dir = t.TempDir() // outside any module, as in a CI job
	cmd.Env = append(os.Environ(),
		"GOBIN="+gobin, "GOPROXY=file://"+filepath.ToSlash(proxy), "GOFLAGS=-mod=mod",
		"GONOSUMDB="+path, "GONOSUMCHECK=1", "GOSUMDB=off", "GOTOOLCHAIN=local", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/scripts/envlease@%s: %v\n%s", path, version, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "envlease"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Fatalf("the installed envlease --version: %v %s", err, out)
	}
}
