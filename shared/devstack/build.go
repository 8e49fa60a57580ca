package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
)

// versitygwModule and versitygwPackage name what is built. The version is not
// written here: it is read from go.mod, so bumping the pin there is the only
// step needed to move to another release.
const (
	versitygwModule  = "github.com/versity/versitygw"
	versitygwPackage = versitygwModule + "/cmd/versitygw"
)

// VersityGWBinary returns the path of the versitygw binary pinned in go.mod,
// building it into os.UserCacheDir()/envlease/bin the first time. Concurrent
// callers (test packages run in parallel, each in its own process) serialise on
// a lock file: one builds, the others wait and reuse its result. progress
// receives one line when a build starts or has to be waited for; nil discards.
func VersityGWBinary(ctx context.Context, progress io.Writer) (string, error) {
	root, version, err := pinnedModule(versitygwModule)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("devstack: locate user cache dir for versitygw: %w", err)
	}
	bin := filepath.Join(cache, "envlease", "bin", "versitygw-"+version)
	return buildPinned(ctx, progress, pinnedTool{name: "versitygw", version: version, pkg: versitygwPackage, root: root, bin: bin})
}

// pinnedTool is a command of a module that go.mod requires, built at that
// version into bin.
type pinnedTool struct {
	name, version, pkg, root, bin string
	// env is added to the build's environment (CGO_ENABLED=1, say).
	env []string
}

// buildPinned builds t once: concurrent callers serialise on a lock file
// beside t.bin, and the binary appears under its final name only whole.
func buildPinned(ctx context.Context, progress io.Writer, t pinnedTool) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if isExecutable(t.bin) {
		return t.bin, nil
	}
	binDir := filepath.Dir(t.bin)
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("devstack: create %s: %w", binDir, err)
	}

	unlock, err := lockFile(ctx, t.bin+".lock", func() {
		fmt.Fprintf(progress, "waiting for another process to finish building %s %s…\n", t.name, t.version)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	// Whoever held the lock before us may have built it already.
	if isExecutable(t.bin) {
		return t.bin, nil
	}

	// Holding the lock means no build of this tool is running, so any
	// build dir of it left here belongs to a builder that was killed.
	if stale, err := filepath.Glob(filepath.Join(binDir, "build-"+t.name+"-*")); err == nil {
		for _, d := range stale {
			_ = os.RemoveAll(d)
		}
	}

	fmt.Fprintf(progress, "building %s %s (first run only)…\n", t.name, t.version)
	start := time.Now()
	// Build into a private directory on the same filesystem and rename, so
	// no process ever sees a half-written binary under the final name, even
	// if this one is killed mid-build.
	tmpDir, err := os.MkdirTemp(binDir, "build-"+t.name+"-*")
	if err != nil {
		return "", fmt.Errorf("devstack: create build dir: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("devstack: the go command is needed to build %s %s: %w", t.name, t.version, err)
	}
	out := filepath.Join(tmpDir, t.name)
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", out, t.pkg)
	// Building inside the module makes go use the go.mod/go.sum pin, so the
	// binary is exactly the version the rest of the module was tested with.
	cmd.Dir = t.root
	cmd.Env = append(os.Environ(), t.env...)
	var buildOut bytes.Buffer
	cmd.Stdout = &buildOut
	cmd.Stderr = &buildOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("devstack: go build %s@%s in %s: %w\n%s", t.pkg, t.version, t.root, err, tail(buildOut.Bytes(), 4096))
	}
	if err := os.Rename(out, t.bin); err != nil {
		return "", fmt.Errorf("devstack: install %s binary: %w", t.name, err)
	}
	fmt.Fprintf(progress, "built %s %s in %s: %s\n", t.name, t.version, time.Since(start).Round(time.Second), t.bin)
	return t.bin, nil
}

// moduleRoot is the nearest folder with a go.mod above the working directory
// (tests run in their package directory, the dev server at the root).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("devstack: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("devstack: no go.mod above the working directory; run from inside the envlease module")
		}
		dir = parent
	}
}

// pinnedModule finds the module root and the version of module it requires.
func pinnedModule(module string) (root, version string, err error) {
	dir, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	gomod := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", "", fmt.Errorf("devstack: read %s: %w", gomod, err)
	}
	f, err := modfile.ParseLax(gomod, data, nil)
	if err != nil {
		return "", "", fmt.Errorf("devstack: parse %s: %w", gomod, err)
	}
	for _, r := range f.Replace {
		// A replaced module would be cached under a version name it does not
		// have; refuse rather than run a binary nobody can identify.
		if r.Old.Path == module {
			return "", "", fmt.Errorf("devstack: %s replaces %s; devstack only runs the pinned release", gomod, module)
		}
	}
	for _, r := range f.Require {
		if r.Mod.Path == module {
			return dir, r.Mod.Version, nil
		}
	}
	return "", "", fmt.Errorf("devstack: %s does not require %s", gomod, module)
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait. flock rather than an O_EXCL marker file because the kernel drops
// it when the holder dies, so a killed build never leaves a stale lock.
// waiting is called once if the lock is held by someone else.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("devstack: open lock %s: %w", path, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("devstack: lock %s: %w", path, err)
		}
		if !told {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("devstack: waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// tail returns at most the last n bytes of b as a string, trimmed.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
