package netstack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"
)

// SecretBinding is one secret the boundary adds to the HTTPS requests the
// environment makes to Hosts (docs/secrets.md): Header set to Value with
// {secret} replaced, or, with BasicUser, HTTP basic authentication of
// BasicUser and the secret.
type SecretBinding struct {
	Secret    string
	Hosts     []string
	Header    string
	Value     string
	BasicUser string
}

// Secrets is what the boundary adds, and how it trusts the real servers.
type Secrets struct {
	Bindings []SecretBinding
	// Value returns a secret's value, held in the agent's memory; false
	// while the node does not hold it (then a bound connection is closed,
	// recorded, and nothing is sent).
	Value func(name string) (string, bool)
	// Roots verify the real servers' certificates (nil: the system's).
	// Only tests add theirs.
	Roots *x509.CertPool
}

// interceptPort is the only port whose TLS connections the boundary
// terminates: HTTPS, where the client always speaks first, so the server
// name is read before anything of the server's is passed on.
const interceptPort = 443

// interceptor is a boundary's part for bound secrets: the environment's
// own CA (its private key only in this memory) and the leaf certificates
// it signed for bound hosts.
type interceptor struct {
	sec    Secrets
	byHost map[string][]SecretBinding
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	now    func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// caLife is how long an environment's CA and its leaves are valid: longer
// than any environment lives.
const caLife = 400 * 24 * time.Hour

func newInterceptor(sec Secrets, now func() time.Time) (*interceptor, error) {
	in := &interceptor{sec: sec, byHost: map[string][]SecretBinding{}, now: now, leaves: map[string]*tls.Certificate{}}
	for _, b := range sec.Bindings {
		for _, h := range b.Hosts {
			h = strings.ToLower(h)
			in.byHost[h] = append(in.byHost[h], b)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "envlease environment CA", Organization: []string{"envlease"}},
		NotBefore:    t.Add(-time.Hour), NotAfter: t.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		// It signs for the bound hosts only: a client that checks name
		// constraints refuses anything else it might sign.
		PermittedDNSDomains: in.hosts(), PermittedDNSDomainsCritical: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("environment CA: %w", err)
	}
	in.caCert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	in.caKey = key
	in.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return in, nil
}

func (in *interceptor) hosts() []string {
	out := make([]string, 0, len(in.byHost))
	for h := range in.byHost {
		out = append(out, h)
	}
	return out
}

// binds says whether a TLS connection to name on port is terminated.
func (in *interceptor) binds(name string, port uint16) bool {
	if in == nil || port != interceptPort {
		return false
	}
	_, ok := in.byHost[name]
	return ok
}

// leaf is the certificate the environment is shown for host.
func (in *interceptor) leaf(host string) (*tls.Certificate, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.leaves[host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	t := in.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: t.Add(-time.Hour), NotAfter: in.caCert.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, in.caCert, &key.PublicKey, in.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	in.leaves[host] = c
	return c, nil
}

// apply adds the secrets bound to host to h, and returns their names; a
// secret the node does not hold is an error naming it.
func (in *interceptor) apply(host string, h http.Header) ([]string, error) {
	var names []string
	for _, b := range in.byHost[host] {
		v, ok := in.sec.Value(b.Secret)
		if !ok {
			return nil, fmt.Errorf("secret %s is not held by this node for the environment", b.Secret)
		}
		if b.BasicUser != "" {
			h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(b.BasicUser+":"+v)))
		} else {
			h.Set(b.Header, strings.Replace(b.Value, "{secret}", v, 1))
		}
		names = append(names, b.Secret)
	}
	return names, nil
}

// CACert is the PEM certificate of the environment's CA, which the
// environment trusts (nil without bound secrets).
func (b *Boundary) CACert() []byte {
	if b.sec == nil {
		return nil
	}
	return b.sec.caPEM
}
