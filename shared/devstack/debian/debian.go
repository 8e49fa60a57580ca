// Package debian installs the pinned Debian packages that tests of real
// containers need (busybox-static, whose busybox makes their image), the way
// .ci/run installs what it needs: with apt-get, as root, once per machine.
// runc is not one of them: the project builds its own pinned release
// (devstack.RuncBinary). Tests never skip for want
// of them: when a package cannot be had, they fail and say how to get it.
package debian

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The pinned packages.
const (
	BusyboxPackage = "busybox-static"
	BusyboxVersion = "1:1.35.0-4+deb12u1+b1"
)

// lockPath serializes apt-get between parallel test processes.
var lockPath = filepath.Join(os.TempDir(), "envlease-apt.lock")

// Ensure gives the path of binary, installing pkg at version with apt-get
// when it is not on PATH.
func Ensure(ctx context.Context, binary, pkg, version string) (string, error) {
	if p, err := exec.LookPath(binary); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s is not on PATH and only root can install it: run 'sudo apt-get install -y %s=%s'", binary, pkg, version)
	}
	unlock, err := lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	if p, err := exec.LookPath(binary); err == nil {
		return p, nil
	}
	install := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", pkg+"="+version)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	out, err := install()
	if err != nil {
		// The package lists may be missing or stale on a fresh machine.
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %v\n%s", uerr, tail(uout))
		}
		out, err = install()
	}
	if err != nil {
		return "", fmt.Errorf("apt-get install -y %s=%s: %v\n%s", pkg, version, err, tail(out))
	}
	return exec.LookPath(binary)
}

// Extract unpacks the pinned package pkg (its files, without installing it)
// into dir, downloading its .deb once into a cache folder.
func Extract(ctx context.Context, pkg, version, dir string) error {
	deb, err := download(ctx, pkg, version)
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %v\n%s", deb, err, tail(out))
	}
	return nil
}

func download(ctx context.Context, pkg, version string) (string, error) {
	cache := filepath.Join(os.TempDir(), "envlease-debs")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	want := filepath.Join(cache, pkg+"_"+strings.ReplaceAll(version, ":", "%3a")+".deb")
	if _, err := os.Stat(want); err == nil {
		return want, nil
	}
	unlock, err := lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(want); err == nil {
		return want, nil
	}
	tmp, err := os.MkdirTemp(cache, ".dl-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	get := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "download", pkg+"="+version)
		cmd.Dir = tmp
		return cmd.CombinedOutput()
	}
	out, err := get()
	if err != nil && os.Geteuid() == 0 {
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %v\n%s", uerr, tail(uout))
		}
		out, err = get()
	}
	if err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %v\n%s", pkg, version, err, tail(out))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s=%s left %d .deb files", pkg, version, len(debs))
	}
	return want, os.Rename(debs[0], want)
}

// BusyboxRootfs builds a minimal root filesystem in dir: Debian's static
// busybox as bin/busybox, its applets as links beside it, and the folders a
// container runtime mounts over.
func BusyboxRootfs(ctx context.Context, dir string) error {
	x, err := os.MkdirTemp("", "busybox-deb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(x)
	if err := Extract(ctx, BusyboxPackage, BusyboxVersion, x); err != nil {
		return err
	}
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	bb := filepath.Join(dir, "bin", "busybox")
	b, err := os.ReadFile(filepath.Join(x, "bin", "busybox"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(bb, b, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"), 0o644)
}

// lock takes an flock on lockPath (dropped by the kernel if we die).
func lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// BusyboxImage is a one-layer OCI image of BusyboxRootfs for the node's
// platform: what the container runtime's tests and the devserver's demo
// run, so that neither needs a registry outside.
func BusyboxImage(ctx context.Context) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "busybox-rootfs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := BusyboxRootfs(ctx, dir); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = runtime.GOOS, runtime.GOARCH
	cf.Config.Cmd = []string{"sh"}
	return mutate.ConfigFile(img, cf)
}
