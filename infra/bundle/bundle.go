// Package bundle builds the Lambda bootstrap binaries. The CDK app (infra) and
// the scripts/build program both call it, so the binaries that CDK packages,
// that SAM runs and that a developer builds by hand are made the same way.
package bundle

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Module is the module path the repository root's go.mod declares.
const Module = "github.com/envlease/envlease"

// FunctionsDir is where each Lambda's package main lives: functions/<name>/main.go.
const FunctionsDir = "functions"

// DefaultOutDir is the build folder, relative to the repository root
// (gitignored as /build/). Each function ends up in <out>/<name>/bootstrap.
const DefaultOutDir = "build/lambda"

// Target platform of every function: provided.al2023 on Graviton.
const (
	GOOS   = "linux"
	GOARCH = "arm64"
)

// BuildFlags are the go build flags for every bootstrap binary: no RPC
// shim (the provided runtimes do not need it), stripped, reproducible paths,
// and no VCS stamp so an unchanged source tree gives byte-identical binaries
// and therefore unchanged CDK asset hashes (no needless redeploys).
var BuildFlags = []string{"-tags", "lambda.norpc", "-ldflags=-s -w", "-trimpath", "-buildvcs=false"}

// Options say what to build and where.
type Options struct {
	// Root is the repository root (the directory holding go.mod).
	Root string
	// OutDir receives <name>/bootstrap for each function. Relative paths are
	// taken from Root. Empty means DefaultOutDir.
	OutDir string
	// Functions are the names under functions/ to build, in any order.
	Functions []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// GOARCH overrides the target architecture (empty: GOARCH, Lambda's
	// arm64). Only tests set it, to run the same build on the machine that
	// builds it; everything else about the build stays as deployed.
	GOARCH string
}

// Result tells where each function's asset directory is and how long the
// build took.
type Result struct {
	// Dirs maps a function name to the absolute directory that holds its
	// bootstrap (and nothing else), ready for lambda.Code.fromAsset.
	Dirs     map[string]string
	Duration time.Duration
}

// MissingError lists functions whose package main does not exist.
type MissingError struct {
	Root    string
	Missing []string
}

func (e *MissingError) Error() string {
	paths := make([]string, len(e.Missing))
	for i, n := range e.Missing {
		paths[i] = filepath.ToSlash(filepath.Join(FunctionsDir, n, "main.go"))
	}
	return fmt.Sprintf("no Lambda source for %s: each function group needs a package main at %s",
		strings.Join(e.Missing, ", "), strings.Join(paths, ", "))
}

// Build compiles every named function for linux/arm64 in a single go build
// invocation (so shared packages are compiled once, in parallel, reusing the
// build cache), then places each binary as <out>/<name>/bootstrap.
func Build(ctx context.Context, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Root == "" {
		return nil, errors.New("bundle: Root is required")
	}
	if len(opts.Functions) == 0 {
		return nil, errors.New("bundle: no functions to build")
	}
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	out := opts.OutDir
	if out == "" {
		out = DefaultOutDir
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(opts.Root, out)
	}

	names := append([]string(nil), opts.Functions...)
	sort.Strings(names)
	var missing []string
	for i, n := range names {
		if i > 0 && names[i-1] == n {
			return nil, fmt.Errorf("bundle: function %q listed twice", n)
		}
		if n == "" || strings.ContainsAny(n, `/\.`) {
			return nil, fmt.Errorf("bundle: bad function name %q", n)
		}
		if _, err := os.Stat(filepath.Join(opts.Root, FunctionsDir, n, "main.go")); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, &MissingError{Root: opts.Root, Missing: missing}
	}

	binDir := filepath.Join(out, ".bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build"}, BuildFlags...)
	args = append(args, "-o", binDir+string(filepath.Separator))
	for _, n := range names {
		args = append(args, "./"+FunctionsDir+"/"+n)
	}
	arch := GOARCH
	if opts.GOARCH != "" {
		arch = opts.GOARCH
	}
	fmt.Fprintf(logw, "building %d Lambda binaries for %s/%s (%s)\n", len(names), GOOS, arch, strings.Join(names, ", "))
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = opts.Root
	cmd.Env = append(os.Environ(), "GOOS="+GOOS, "GOARCH="+arch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout = logw
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}

	res := &Result{Dirs: make(map[string]string, len(names))}
	for _, n := range names {
		dir := filepath.Join(out, n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := install(filepath.Join(binDir, n), filepath.Join(dir, "bootstrap")); err != nil {
			return nil, fmt.Errorf("bundle: %s: %w", n, err)
		}
		res.Dirs[n] = dir
	}
	res.Duration = time.Since(start)
	fmt.Fprintf(logw, "built %d Lambda binaries in %s into %s\n", len(names), res.Duration.Round(10*time.Millisecond), out)
	return res, nil
}

// install moves the fresh binary into place as an executable. The asset
// directory must hold only the bootstrap: CDK hashes and uploads all of it.
func install(src, dst string) error {
	if err := os.Chmod(src, 0o755); err != nil {
		return err
	}
	return os.Rename(src, dst)
}

// goTool is the go command that is running this program's toolchain where
// possible, so the build uses the same Go version as the caller.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// FindRoot walks up from dir to the directory whose go.mod declares Module.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if mod, err := modulePath(filepath.Join(dir, "go.mod")); err == nil && mod == Module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for module %s in %s or above", Module, dir)
		}
		dir = parent
	}
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New("no module line")
}

// Discover lists the functions that exist: every functions/<name>/main.go.
func Discover(root string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, FunctionsDir, "*", "main.go"))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(matches))
	for _, m := range matches {
		names = append(names, filepath.Base(filepath.Dir(m)))
	}
	sort.Strings(names)
	return names, nil
}
