package runtimes_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/runtimes"
)

// A container's root filesystem gets the environment's CA in its own
// bundle and appended to the image's, without following an image's
// symlink out of its root.
func TestWriteContainerBundle(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nenv-ca\n-----END CERTIFICATE-----\n")
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, rootfs, outside string)
		image   string // what the image's bundle should hold after
	}{
		{"debian", func(t *testing.T, rootfs, _ string) {
			os.MkdirAll(filepath.Join(rootfs, "etc/ssl/certs"), 0o755)
			os.WriteFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"), []byte("image-roots\n"), 0o644)
		}, "image-roots\n"},
		{"no roots", func(*testing.T, string, string) {}, ""},
		{"symlink out", func(t *testing.T, rootfs, outside string) {
			os.MkdirAll(filepath.Join(rootfs, "etc/ssl/certs"), 0o755)
			os.Symlink(outside, filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
			os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
			os.Symlink(filepath.Dir(outside), filepath.Join(rootfs, "etc/envlease"))
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rootfs, outsideDir := t.TempDir(), t.TempDir()
			outside := filepath.Join(outsideDir, "host.crt")
			os.WriteFile(outside, []byte("host file\n"), 0o644)
			c.prepare(t, rootfs, outside)
			err := runtimes.WriteContainerBundle(rootfs, ca)
			if b, _ := os.ReadFile(outside); string(b) != "host file\n" {
				t.Fatalf("a file outside the root changed: %q", b)
			}
			if entries, _ := os.ReadDir(outsideDir); len(entries) != 1 {
				t.Fatalf("something was written outside the root: %v", entries)
			}
			if c.name == "symlink out" {
				return // refused or written inside: either way nothing outside
			}
			if err != nil {
				t.Fatal(err)
			}
			own, _ := os.ReadFile(filepath.Join(rootfs, strings.TrimPrefix(runtimes.ContainerBundle, "/")))
			if !bytes.HasPrefix(own, []byte(c.image)) || !bytes.HasSuffix(own, ca) {
				t.Fatalf("the container's bundle: %q", own)
			}
			if c.image != "" {
				img, _ := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
				if !bytes.Equal(img, own) {
					t.Fatalf("the image's bundle: %q", img)
				}
			}
		})
	}
	if env := strings.Join(runtimes.TrustEnv("/b"), " "); !strings.Contains(env, "SSL_CERT_FILE=/b") || !strings.Contains(env, "NODE_EXTRA_CA_CERTS=/b") || !strings.Contains(env, "REQUESTS_CA_BUNDLE=/b") || !strings.Contains(env, "CURL_CA_BUNDLE=/b") {
		t.Fatalf("TrustEnv: %s", env)
	}
}
