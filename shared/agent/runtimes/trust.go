package runtimes

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Where an environment whose template binds secrets finds the certificate
// of its own CA, which its network boundary signs the bound hosts'
// certificates with (docs/secrets.md): a bundle of the system's roots and
// that CA, named by the variables common tools read.
var caBundleVars = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// TrustEnv names the CA bundle at path for the common tools (OpenSSL and
// Go's SSL_CERT_FILE, Node, Python requests, curl, git).
func TrustEnv(path string) []string {
	out := make([]string, len(caBundleVars))
	for i, k := range caBundleVars {
		out[i] = k + "=" + path
	}
	return out
}

// systemBundles are where distributions keep the roots bundle.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/cert.pem",                  // Alpine's libressl, macOS
}

// CABundle is base (a roots bundle, or nil for the node's) with ca added,
// so a variable that replaces the roots (SSL_CERT_FILE) keeps every
// public server trusted.
func CABundle(base, ca []byte) []byte {
	if base == nil {
		for _, p := range systemBundles {
			if b, err := os.ReadFile(p); err == nil {
				base = b
				break
			}
		}
	}
	var buf bytes.Buffer
	buf.Write(base)
	if len(base) > 0 && !bytes.HasSuffix(base, []byte("\n")) {
		buf.WriteByte('\n')
	}
	buf.WriteString("# envlease: this environment's CA, for the hosts its template binds secrets to\n")
	buf.Write(ca)
	return buf.Bytes()
}

// CABundleFor reads what a boundary offers: its CA's certificate, nil
// when it terminates nothing.
func CABundleFor(egress any) []byte {
	if c, ok := egress.(interface{ CACert() []byte }); ok {
		return c.CACert()
	}
	return nil
}

// ContainerBundle is where a container whose template binds secrets finds
// the roots with its CA (TrustEnv names it); the image's own
// /etc/ssl/certs/ca-certificates.crt gets the CA appended too, for tools
// that read only that.
const ContainerBundle = "/etc/envlease/ca-certificates.crt"

// imageBundle is the Debian-style bundle most images' tools read.
const imageBundle = "etc/ssl/certs/ca-certificates.crt"

// WriteContainerBundle writes the environment's CA into the container's
// root filesystem rootfs (the container's own copy): ContainerBundle, of the
// image's roots and the CA, and the CA appended to the image's bundle when
// it has one. Everything goes through os.Root, so an image whose paths are
// symlinks out of its root writes nothing outside it.
func WriteContainerBundle(rootfs string, ca []byte) error {
	if len(ca) == 0 {
		return nil
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	base, err := root.ReadFile(imageBundle)
	if err != nil {
		base = []byte{} // an image without roots trusts its CA only
	}
	bundle := CABundle(base, ca)
	if err := root.MkdirAll(strings.TrimPrefix(path.Dir(ContainerBundle), "/"), 0o755); err != nil {
		return err
	}
	if err := writeNew(root, strings.TrimPrefix(ContainerBundle, "/"), bundle); err != nil {
		return err
	}
	if len(base) > 0 {
		return writeNew(root, imageBundle, bundle)
	}
	return nil
}

// writeNew replaces name in root with b (a symlink there is replaced, not
// followed).
func writeNew(root *os.Root, name string, b []byte) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
