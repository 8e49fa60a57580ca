// Package testdeps knows the external packages the tests use (Chromium,
// runc, busybox, Java, Node.js and npm, DynamoDB Local, versitygw): it upgrades the
// Debian ones to what a new machine would install today and reads the
// version of each, for scripts/testdeps and .ci/run.
package testdeps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/devstack/debian"
)

// Upgraded are the Debian packages that follow Debian's current release:
// a machine that installs them today gets the newest, so a test run must
// too. (runc is built from the module pinned in go.mod, and busybox pinned
// by version: see devstack.RuncBinary and package debian.)
var Upgraded = []string{"chromium", "openjdk-17-jre-headless"}

// Upgrade installs or upgrades the packages of Upgraded to Debian's current
// version, as root; for anyone else it says what to run and does nothing.
func Upgrade(ctx context.Context, progress io.Writer) error {
	if os.Geteuid() != 0 {
		fmt.Fprintf(progress, "testdeps: not root, so not upgrading; run 'sudo apt-get update && sudo apt-get install -y %s'\n", strings.Join(Upgraded, " "))
		return nil
	}
	fmt.Fprintf(progress, "testdeps: apt-get update and install %s…\n", strings.Join(Upgraded, " "))
	if out, err := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %v\n%s", err, lastLines(out, 20))
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, Upgraded...)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %v\n%s", strings.Join(Upgraded, " "), err, lastLines(out, 20))
	}
	return nil
}

// Version is one package's version, or why it could not be read.
type Version struct {
	Name    string
	Version string
	Err     error
}

// Versions reads the version of every package the tests use, installing the
// pinned ones the way the tests would (runc, busybox, DynamoDB Local,
// versitygw) so that what is printed is what the tests run.
func Versions(ctx context.Context, progress io.Writer) []Version {
	return []Version{
		command(ctx, "chromium", "chromium", "--version"),
		runcVersion(ctx, progress),
		busyboxVersion(ctx),
		command(ctx, "java", "java", "-version"),
		command(ctx, "node", "node", "--version"),
		command(ctx, "npm", "npm", "--version"),
		dynamoLocalVersion(ctx, progress),
		versityVersion(ctx, progress),
	}
}

// command runs a program's own version flag and keeps its first line.
func command(ctx context.Context, name, prog string, args ...string) Version {
	path, err := exec.LookPath(prog)
	if err != nil {
		return Version{Name: name, Err: fmt.Errorf("%s is not on PATH", prog)}
	}
	return run(ctx, name, path, args...)
}

// run keeps the first line of what path printed on standard output, or of
// standard error when it printed nothing else (java -version). Chromium's
// wrapper script writes noise to standard error before the version.
func run(ctx context.Context, name, path string, args ...string) Version {
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Version{Name: name, Err: fmt.Errorf("%s %s: %v: %s", path, strings.Join(args, " "), err, firstLine([]byte(stderr.String())))}
	}
	out := stdout.String()
	if strings.TrimSpace(out) == "" {
		out = stderr.String()
	}
	return Version{Name: name, Version: firstLine([]byte(out))}
}

// runcVersion is the project's own build of the runc pinned in go.mod,
// built first when missing, as the container tests would.
func runcVersion(ctx context.Context, progress io.Writer) Version {
	v, err := devstack.RuncVersion(ctx, progress)
	if err != nil {
		return Version{Name: "runc", Err: err}
	}
	return Version{Name: "runc", Version: v}
}

func busyboxVersion(ctx context.Context) Version {
	dir, err := os.MkdirTemp("", "testdeps-busybox-")
	if err != nil {
		return Version{Name: "busybox", Err: err}
	}
	defer os.RemoveAll(dir)
	if err := debian.Extract(ctx, debian.BusyboxPackage, debian.BusyboxVersion, dir); err != nil {
		return Version{Name: "busybox", Err: err}
	}
	return run(ctx, "busybox", filepath.Join(dir, "bin", "busybox"), "--help")
}

func dynamoLocalVersion(ctx context.Context, progress io.Writer) Version {
	dir, err := devstack.DynamoLocalJar(ctx, progress)
	if err != nil {
		return Version{Name: "DynamoDB Local", Err: err}
	}
	// The jar answers -version with its own release (1.25.1 and later).
	java, err := exec.LookPath("java")
	if err != nil {
		return Version{Name: "DynamoDB Local", Err: errors.New("java is not on PATH")}
	}
	v := run(ctx, "DynamoDB Local", java, "-jar", filepath.Join(dir, "DynamoDBLocal.jar"), "-version")
	if v.Err == nil {
		v.Version += " (in the pinned npm package's " + filepath.Base(dir) + ")"
	}
	return v
}

func versityVersion(ctx context.Context, progress io.Writer) Version {
	bin, err := devstack.VersityGWBinary(ctx, progress)
	if err != nil {
		return Version{Name: "versitygw", Err: err}
	}
	return Version{Name: "versitygw", Version: filepath.Base(bin) + " (built from the module pinned in go.mod)"}
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
