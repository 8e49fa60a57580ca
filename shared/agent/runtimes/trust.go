package runtimes

import (
	"bytes"
	"os"
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
