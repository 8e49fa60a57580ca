package identity

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// KeyStore keeps the local issuer's keys: one item, replaced whole, each
// write conditioned on the version it read (store.IdentityKeys).
type KeyStore interface {
	// GetIdentityKeys answers the stored body and its version; "" and 0
	// when there is none yet.
	GetIdentityKeys(ctx context.Context) (string, int64, error)
	// PutIdentityKeys writes body as version+1 if the stored version is
	// still version; false when another write came first.
	PutIdentityKeys(ctx context.Context, body string, version int64) (bool, error)
}

// Local is the dev server's keys: ECDSA P-256 keys made on first use and
// kept in the table, so a restarted dev server (on a kept table) signs with
// the same key and verifiers' cached key sets stay good. The private keys
// are in the table in plain: a local stack's only (on AWS the key is KMS's,
// KMSKeys).
type Local struct {
	store KeyStore
	clock clock.Clock
}

// NewLocal is the local key source.
func NewLocal(st KeyStore, clk clock.Clock) *Local { return &Local{store: st, clock: clk} }

type localBody struct {
	Current []byte         `json:"current"` // PKCS #8
	Next    []byte         `json:"next"`
	Retired []localRetired `json:"retired,omitempty"`
}

type localRetired struct {
	Public  []byte    `json:"public"` // PKIX
	Retired time.Time `json:"retired"`
}

// LocalSigner signs with a private key in memory.
type LocalSigner struct{ key *ecdsa.PrivateKey }

// NewLocalSigner makes a fresh P-256 key.
func NewLocalSigner() (*LocalSigner, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &LocalSigner{key: k}, nil
}

// Public is the key's public half.
func (s *LocalSigner) Public() crypto.PublicKey { return &s.key.PublicKey }

// SignDigest signs digest (DER).
func (s *LocalSigner) SignDigest(_ context.Context, digest []byte) ([]byte, error) {
	return ecdsa.SignASN1(rand.Reader, s.key, digest)
}

func (s *LocalSigner) pkcs8() []byte {
	b, _ := x509.MarshalPKCS8PrivateKey(s.key) // a P-256 key always marshals
	return b
}

func parseSigner(b []byte) (*LocalSigner, error) {
	k, err := x509.ParsePKCS8PrivateKey(b)
	if err != nil {
		return nil, err
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("not an ECDSA key")
	}
	return &LocalSigner{key: ec}, nil
}

// Keyring reads the keys, making them on first use.
func (l *Local) Keyring(ctx context.Context) (Keyring, error) {
	for try := 0; try < 3; try++ {
		body, _, err := l.store.GetIdentityKeys(ctx)
		if err != nil {
			return Keyring{}, err
		}
		if body != "" {
			return l.decode(body)
		}
		b, err := freshBody()
		if err != nil {
			return Keyring{}, domain.Internal(err)
		}
		if _, err := l.store.PutIdentityKeys(ctx, string(b), 0); err != nil {
			return Keyring{}, err
		}
		// Made here or by another at once: read what is stored.
	}
	return Keyring{}, domain.Errorf(domain.CodeConflict, "the issuer's keys are changing too fast; retry")
}

func freshBody() ([]byte, error) {
	cur, err := NewLocalSigner()
	if err != nil {
		return nil, err
	}
	next, err := NewLocalSigner()
	if err != nil {
		return nil, err
	}
	return json.Marshal(localBody{Current: cur.pkcs8(), Next: next.pkcs8()})
}

func (l *Local) decode(body string) (Keyring, error) {
	var b localBody
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		return Keyring{}, domain.Internal(fmt.Errorf("identity: stored keys: %w", err))
	}
	cur, err := parseSigner(b.Current)
	if err != nil {
		return Keyring{}, domain.Internal(fmt.Errorf("identity: stored current key: %w", err))
	}
	next, err := parseSigner(b.Next)
	if err != nil {
		return Keyring{}, domain.Internal(fmt.Errorf("identity: stored next key: %w", err))
	}
	var r Keyring
	if r.Current, err = NewKey(cur); err != nil {
		return Keyring{}, domain.Internal(err)
	}
	nk, err := PublishedKey(next.Public())
	if err != nil {
		return Keyring{}, domain.Internal(err)
	}
	r.Next = &nk
	for _, old := range b.Retired {
		pub, err := x509.ParsePKIXPublicKey(old.Public)
		if err != nil {
			return Keyring{}, domain.Internal(fmt.Errorf("identity: stored retired key: %w", err))
		}
		k, err := PublishedKey(pub)
		if err != nil {
			return Keyring{}, domain.Internal(err)
		}
		k.Retired = old.Retired
		r.Retired = append(r.Retired, k)
	}
	return r, nil
}

// Rotate makes the next key the current one, retires the current one (it
// stays published for the longest token lifetime) and makes a new next
// one. Retired keys past that are dropped.
func (l *Local) Rotate(ctx context.Context) error {
	if _, err := l.Keyring(ctx); err != nil { // made if absent
		return err
	}
	for try := 0; try < 3; try++ {
		body, version, err := l.store.GetIdentityKeys(ctx)
		if err != nil {
			return err
		}
		var b localBody
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			return domain.Internal(fmt.Errorf("identity: stored keys: %w", err))
		}
		cur, err := parseSigner(b.Current)
		if err != nil {
			return domain.Internal(err)
		}
		pub, err := x509.MarshalPKIXPublicKey(cur.Public())
		if err != nil {
			return domain.Internal(err)
		}
		now := l.clock.Now()
		kept := []localRetired{{Public: pub, Retired: now}}
		for _, old := range b.Retired {
			if now.Before(old.Retired.Add(domain.MaxIdentityLifetime)) {
				kept = append(kept, old)
			}
		}
		fresh, err := NewLocalSigner()
		if err != nil {
			return domain.Internal(err)
		}
		nb, err := json.Marshal(localBody{Current: b.Next, Next: fresh.pkcs8(), Retired: kept})
		if err != nil {
			return domain.Internal(err)
		}
		done, err := l.store.PutIdentityKeys(ctx, string(nb), version)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return domain.Errorf(domain.CodeConflict, "the issuer's keys are changing too fast; retry")
}
