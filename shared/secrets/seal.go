// Package secrets holds organization secrets: the API that sets, lists and
// deletes them (never showing a value), the envelope encryption they are
// stored under, and the opening of the ones a template binds for the node
// that runs its environment (docs/secrets.md).
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
)

// DataKeys makes and opens data keys: a key service that never hands out
// the key it seals them with. KMS in AWS (KMSKeys), the dev server's own key
// locally (LocalKeys). context binds a data key to the secret it seals: the
// service refuses to open it for another.
type DataKeys interface {
	// NewDataKey returns a fresh 256-bit data key in plain (to use once
	// and forget) and sealed (to store), with the id of the key that
	// sealed it.
	NewDataKey(ctx context.Context, context map[string]string) (plain, sealed []byte, keyID string, err error)
	// OpenDataKey opens a sealed data key.
	OpenDataKey(ctx context.Context, keyID string, sealed []byte, context map[string]string) ([]byte, error)
}

// Sealed is a value sealed by Seal.
type Sealed struct {
	KeyID                      string
	DataKey, Nonce, Ciphertext []byte
}

// encryptionContext is what a data key is bound to: the organization and
// the secret's name (KMS logs it in CloudTrail with every use).
func encryptionContext(org, name string) map[string]string {
	return map[string]string{"envlease:org": org, "envlease:secret": name}
}

// associatedData binds the ciphertext to its organization and name too, so
// a sealed value copied to another item does not open there.
func associatedData(org, name string) []byte {
	return []byte("envlease-secret\x00" + org + "\x00" + name)
}

// Seal encrypts value for org's secret name under a fresh data key
// (AES-256-GCM), which keys seals.
func Seal(ctx context.Context, keys DataKeys, org, name string, value []byte) (Sealed, error) {
	plain, sealedKey, keyID, err := keys.NewDataKey(ctx, encryptionContext(org, name))
	if err != nil {
		return Sealed{}, err
	}
	defer clear(plain)
	nonce, ct, err := gcmSeal(plain, value, associatedData(org, name))
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{KeyID: keyID, DataKey: sealedKey, Nonce: nonce, Ciphertext: ct}, nil
}

// Open decrypts what Seal sealed for org's secret name.
func Open(ctx context.Context, keys DataKeys, org, name string, s Sealed) ([]byte, error) {
	plain, err := keys.OpenDataKey(ctx, s.KeyID, s.DataKey, encryptionContext(org, name))
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	return gcmOpen(plain, s.Nonce, s.Ciphertext, associatedData(org, name))
}

func gcmSeal(key, plain, ad []byte) (nonce, ct []byte, err error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, nil, err
	}
	nonce = make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, err
	}
	return nonce, aead.Seal(nil, nonce, plain, ad), nil
}

func gcmOpen(key, nonce, ct, ad []byte) ([]byte, error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(nonce) != aead.NonceSize() {
		return nil, errors.New("sealed secret: bad nonce")
	}
	return aead.Open(nil, nonce, ct, ad)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("data key of %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// LocalKeyID is the KeyID of what LocalKeys sealed.
const LocalKeyID = "local"

// LocalKeys seals data keys with a key the process holds: the dev server's
// (it makes one at start, or reads the file it keeps it in). Not for AWS,
// where the key would sit beside what it protects.
type LocalKeys struct{ key []byte }

// NewLocalKeys is LocalKeys over a 32-byte key.
func NewLocalKeys(key []byte) (*LocalKeys, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("a local secrets key is 32 bytes, got %d", len(key))
	}
	return &LocalKeys{key: append([]byte(nil), key...)}, nil
}

// NewDataKey implements DataKeys.
func (l *LocalKeys) NewDataKey(_ context.Context, ec map[string]string) ([]byte, []byte, string, error) {
	plain := make([]byte, 32)
	if _, err := rand.Read(plain); err != nil {
		return nil, nil, "", err
	}
	nonce, ct, err := gcmSeal(l.key, plain, contextBytes(ec))
	if err != nil {
		return nil, nil, "", err
	}
	return plain, append(nonce, ct...), LocalKeyID, nil
}

// OpenDataKey implements DataKeys.
func (l *LocalKeys) OpenDataKey(_ context.Context, keyID string, sealed []byte, ec map[string]string) ([]byte, error) {
	if keyID != LocalKeyID || len(sealed) < 12 {
		return nil, fmt.Errorf("sealed data key of key %q: not this dev server's", keyID)
	}
	return gcmOpen(l.key, sealed[:12], sealed[12:], contextBytes(ec))
}

func contextBytes(ec map[string]string) []byte {
	return []byte(ec["envlease:org"] + "\x00" + ec["envlease:secret"])
}

// KMSClient is what KMSKeys needs of the KMS SDK client (*kms.Client); tests
// stand a fake behind it.
type KMSClient interface {
	GenerateDataKey(ctx context.Context, in *kms.GenerateDataKeyInput, opts ...func(*kms.Options)) (*kms.GenerateDataKeyOutput, error)
	Decrypt(ctx context.Context, in *kms.DecryptInput, opts ...func(*kms.Options)) (*kms.DecryptOutput, error)
}

// KMSKeys seals data keys with a KMS key: GenerateDataKey when a secret is
// set (the secrets function's only KMS right), Decrypt when a node fetches
// its environment's secrets (the nodes function's only one).
type KMSKeys struct {
	Client KMSClient
	// KeyID is the KMS key's id or ARN.
	KeyID string
}

// NewDataKey implements DataKeys.
func (k KMSKeys) NewDataKey(ctx context.Context, ec map[string]string) ([]byte, []byte, string, error) {
	out, err := k.Client.GenerateDataKey(ctx, &kms.GenerateDataKeyInput{
		KeyId: aws.String(k.KeyID), KeySpec: kmstypes.DataKeySpecAes256, EncryptionContext: ec,
	})
	if err != nil {
		return nil, nil, "", fmt.Errorf("kms generate data key: %w", err)
	}
	return out.Plaintext, out.CiphertextBlob, aws.ToString(out.KeyId), nil
}

// OpenDataKey implements DataKeys. The key is named, so a blob sealed by
// another key is refused by KMS rather than opened with it.
func (k KMSKeys) OpenDataKey(ctx context.Context, keyID string, sealed []byte, ec map[string]string) ([]byte, error) {
	out, err := k.Client.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: sealed, KeyId: aws.String(keyID), EncryptionContext: ec})
	if err != nil {
		return nil, fmt.Errorf("kms decrypt: %w", err)
	}
	return out.Plaintext, nil
}

// NewRandomLocalKeys is LocalKeys over a fresh random key: the dev server's
// and the tests', which keep their tables no longer than the key.
func NewRandomLocalKeys() *LocalKeys {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	return &LocalKeys{key: key}
}
