package identity

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/envlease/envlease/shared/domain"
)

// KMSAPI is the part of the KMS client the issuer calls: Sign with the
// current key, GetPublicKey of every published one. The stack grants the
// signing function exactly these two actions on exactly these keys.
type KMSAPI interface {
	Sign(ctx context.Context, in *kms.SignInput, opts ...func(*kms.Options)) (*kms.SignOutput, error)
	GetPublicKey(ctx context.Context, in *kms.GetPublicKeyInput, opts ...func(*kms.Options)) (*kms.GetPublicKeyOutput, error)
}

// KMSSigner signs with a KMS asymmetric key (ECC_NIST_P256,
// SIGN_VERIFY): the private key never leaves KMS; each token is one
// kms:Sign of its digest.
type KMSSigner struct {
	client KMSAPI
	keyID  string
	public crypto.PublicKey
}

// NewKMSSigner reads the key's public half (kms:GetPublicKey) and checks it
// is a P-256 signing key.
func NewKMSSigner(ctx context.Context, client KMSAPI, keyID string) (*KMSSigner, error) {
	pub, err := kmsPublic(ctx, client, keyID)
	if err != nil {
		return nil, err
	}
	return &KMSSigner{client: client, keyID: keyID, public: pub}, nil
}

func kmsPublic(ctx context.Context, client KMSAPI, keyID string) (crypto.PublicKey, error) {
	out, err := client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
	if err != nil {
		return nil, domain.Unavailable("the identity signing key", fmt.Errorf("kms get public key %s: %w", keyID, err))
	}
	if out.KeySpec != types.KeySpecEccNistP256 || out.KeyUsage != types.KeyUsageTypeSignVerify {
		return nil, fmt.Errorf("identity: KMS key %s is %s for %s; it must be ECC_NIST_P256 for SIGN_VERIFY", keyID, out.KeySpec, out.KeyUsage)
	}
	pub, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("identity: KMS key %s: public key: %w", keyID, err)
	}
	return pub, nil
}

// Public is the key's public half.
func (s *KMSSigner) Public() crypto.PublicKey { return s.public }

// SignDigest has KMS sign a SHA-256 digest.
func (s *KMSSigner) SignDigest(ctx context.Context, digest []byte) ([]byte, error) {
	out, err := s.client.Sign(ctx, &kms.SignInput{
		KeyId: aws.String(s.keyID), Message: digest, MessageType: types.MessageTypeDigest,
		SigningAlgorithm: types.SigningAlgorithmSpecEcdsaSha256,
	})
	if err != nil {
		return nil, fmt.Errorf("kms sign %s: %w", s.keyID, err)
	}
	return out.Signature, nil
}

// KMSConfig names the issuer's KMS keys (docs/identity.md, "Rotating the
// key"): the key that signs, the next one (published, not signing yet),
// and retired ones with when they stopped signing.
type KMSConfig struct {
	// Current is IDENTITY_KMS_KEY: a key id, ARN or alias.
	Current string
	// Next is IDENTITY_KMS_NEXT_KEY, empty for none.
	Next string
	// Retired is IDENTITY_KMS_RETIRED_KEYS: "key=RFC3339,key=RFC3339".
	Retired map[string]time.Time
}

// ParseRetired reads IDENTITY_KMS_RETIRED_KEYS.
func ParseRetired(s string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, at, ok := strings.Cut(part, "=")
		t, err := time.Parse(time.RFC3339, at)
		if !ok || id == "" || err != nil {
			return nil, fmt.Errorf("identity: retired key %q: want key=RFC3339 time", part)
		}
		out[id] = t.UTC()
	}
	return out, nil
}

// KMSKeys is the keyring of KMS keys. Public keys are read once (a warm
// function keeps them); keys never change, only which signs, and that is
// configuration.
type KMSKeys struct {
	client KMSAPI
	cfg    KMSConfig

	mu   sync.Mutex
	ring *Keyring
}

// NewKMSKeys is the KMS key source.
func NewKMSKeys(client KMSAPI, cfg KMSConfig) *KMSKeys { return &KMSKeys{client: client, cfg: cfg} }

// Keyring reads the keys' public halves on first use.
func (k *KMSKeys) Keyring(ctx context.Context) (Keyring, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring != nil {
		return *k.ring, nil
	}
	if k.cfg.Current == "" {
		return Keyring{}, domain.Internal(fmt.Errorf("identity: no KMS key is configured (IDENTITY_KMS_KEY)"))
	}
	cur, err := NewKMSSigner(ctx, k.client, k.cfg.Current)
	if err != nil {
		return Keyring{}, err
	}
	var r Keyring
	if r.Current, err = NewKey(cur); err != nil {
		return Keyring{}, err
	}
	if k.cfg.Next != "" {
		pub, err := kmsPublic(ctx, k.client, k.cfg.Next)
		if err != nil {
			return Keyring{}, err
		}
		nk, err := PublishedKey(pub)
		if err != nil {
			return Keyring{}, err
		}
		r.Next = &nk
	}
	for id, at := range k.cfg.Retired {
		pub, err := kmsPublic(ctx, k.client, id)
		if err != nil {
			return Keyring{}, err
		}
		rk, err := PublishedKey(pub)
		if err != nil {
			return Keyring{}, err
		}
		rk.Retired = at
		r.Retired = append(r.Retired, rk)
	}
	k.ring = &r
	return r, nil
}
