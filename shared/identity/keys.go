// Package identity makes envlease an OIDC issuer for its leases: an
// environment whose template asks for an identity gets short-lived tokens,
// one per audience, that clouds trust by policy (docs/identity.md). The
// issuer publishes its discovery document and its keys (JWKS); tokens are
// signed by a Signer, which holds the private key: on AWS a KMS asymmetric
// key that never leaves KMS (kms.go), locally a key the dev server keeps in
// the table (local.go).
package identity

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/envlease/envlease/shared/domain"
)

// Algorithm is the one signing algorithm: ECDSA P-256 with SHA-256, which
// KMS's ECC_NIST_P256 keys sign and every cloud's STS accepts.
const Algorithm = jose.ES256

// Signer signs with a private key it never gives out.
type Signer interface {
	// Public is the key's public half.
	Public() crypto.PublicKey
	// SignDigest signs a SHA-256 digest and answers an ASN.1 DER ECDSA
	// signature (what KMS's Sign answers).
	SignDigest(ctx context.Context, digest []byte) ([]byte, error)
}

// Key is one key of the issuer, published in its JWKS.
type Key struct {
	// ID is the key's kid: its RFC 7638 thumbprint, so the same key has the
	// same id wherever it is read from.
	ID     string
	Public *ecdsa.PublicKey
	// Signer signs with it; nil for a key only published (the next one, a
	// retired one).
	Signer Signer
	// Retired is when it stopped signing; zero for the current and next.
	Retired time.Time
}

// NewKey describes a signer's key.
func NewKey(s Signer) (Key, error) {
	k, err := PublishedKey(s.Public())
	if err != nil {
		return Key{}, err
	}
	k.Signer = s
	return k, nil
}

// PublishedKey describes a public key that signs nothing here.
func PublishedKey(pub crypto.PublicKey) (Key, error) {
	ec, ok := pub.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return Key{}, fmt.Errorf("identity: the signing key must be ECDSA P-256, it is %T", pub)
	}
	tp, err := (&jose.JSONWebKey{Key: ec}).Thumbprint(crypto.SHA256)
	if err != nil {
		return Key{}, fmt.Errorf("identity: key thumbprint: %w", err)
	}
	return Key{ID: base64.RawURLEncoding.EncodeToString(tp), Public: ec}, nil
}

func (k Key) jwk() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.Public, KeyID: k.ID, Algorithm: string(Algorithm), Use: "sig"}
}

// Keyring is the issuer's keys at one time. Rotation moves Next to Current
// and Current to Retired: Next is published from when it is made, so
// verifiers that cache the JWKS know it before it signs; a retired key stays
// published for the longest token lifetime after it stopped signing, so
// every token it signed verifies until it expires, and then leaves.
type Keyring struct {
	Current Key
	Next    *Key
	Retired []Key
}

// Published are the keys the JWKS lists at now.
func (r Keyring) Published(now time.Time) []Key {
	out := []Key{r.Current}
	if r.Next != nil {
		out = append(out, *r.Next)
	}
	for _, k := range r.Retired {
		if now.Before(k.Retired.Add(domain.MaxIdentityLifetime)) {
			out = append(out, k)
		}
	}
	return out
}

// JWKS is the published key set at now.
func (r Keyring) JWKS(now time.Time) jose.JSONWebKeySet {
	var set jose.JSONWebKeySet
	for _, k := range r.Published(now) {
		set.Keys = append(set.Keys, k.jwk())
	}
	return set
}

// opaque is a go-jose signer over a Signer, for one request's context.
type opaque struct {
	ctx context.Context
	key Key
}

func (o opaque) Public() *jose.JSONWebKey {
	k := o.key.jwk()
	return &k
}

func (o opaque) Algs() []jose.SignatureAlgorithm { return []jose.SignatureAlgorithm{Algorithm} }

// SignPayload signs JWS's signing input: go-jose wants ES256's raw R||S,
// each 32 bytes, where the Signer answers DER.
func (o opaque) SignPayload(payload []byte, alg jose.SignatureAlgorithm) ([]byte, error) {
	if alg != Algorithm {
		return nil, fmt.Errorf("identity: algorithm %s is not %s", alg, Algorithm)
	}
	if o.key.Signer == nil {
		return nil, errors.New("identity: the key has no signer")
	}
	digest := sha256.Sum256(payload)
	der, err := o.key.Signer.SignDigest(o.ctx, digest[:])
	if err != nil {
		return nil, err
	}
	var sig struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(der, &sig)
	if err != nil || len(rest) != 0 || sig.R == nil || sig.S == nil {
		return nil, errors.New("identity: the signer's answer is not a DER ECDSA signature")
	}
	out := make([]byte, 64)
	sig.R.FillBytes(out[:32])
	sig.S.FillBytes(out[32:])
	return out, nil
}
