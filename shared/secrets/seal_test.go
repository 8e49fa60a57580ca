package secrets_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/envlease/envlease/shared/secrets"
)

// fakeKMS stands for KMS behind the SDK's interface (secrets.KMSClient): it
// seals data keys with a key it never hands out, binds them to their
// encryption context, and refuses a wrong key id or context, as KMS does.
type fakeKMS struct {
	master   *secrets.LocalKeys
	keyID    string
	generate int
	decrypt  int
	lastCtx  map[string]string
}

func (f *fakeKMS) GenerateDataKey(ctx context.Context, in *kms.GenerateDataKeyInput, _ ...func(*kms.Options)) (*kms.GenerateDataKeyOutput, error) {
	f.generate++
	if aws.ToString(in.KeyId) != f.keyID || in.KeySpec != "AES_256" {
		return nil, errors.New("fake kms: wrong key or spec")
	}
	f.lastCtx = maps.Clone(in.EncryptionContext)
	plain, sealed, _, err := f.master.NewDataKey(ctx, in.EncryptionContext)
	if err != nil {
		return nil, err
	}
	return &kms.GenerateDataKeyOutput{KeyId: aws.String(f.keyID), Plaintext: plain, CiphertextBlob: sealed}, nil
}

func (f *fakeKMS) Decrypt(ctx context.Context, in *kms.DecryptInput, _ ...func(*kms.Options)) (*kms.DecryptOutput, error) {
	f.decrypt++
	if aws.ToString(in.KeyId) != f.keyID {
		return nil, errors.New("fake kms: IncorrectKeyException")
	}
	plain, err := f.master.OpenDataKey(ctx, secrets.LocalKeyID, in.CiphertextBlob, in.EncryptionContext)
	if err != nil {
		return nil, errors.New("fake kms: InvalidCiphertextException")
	}
	return &kms.DecryptOutput{KeyId: aws.String(f.keyID), Plaintext: plain}, nil
}

// Seal and Open through KMS (a fake KMS client behind the SDK interface;
// no test reaches AWS) and through the local key: the stored parts never
// hold the value or the data key in plain, the data key is bound to the
// organization and name (KMS's encryption context and AES-GCM's associated
// data), and a sealed value moved to another name or organization does
// not open.
func TestSealAndOpen(t *testing.T) {
	ctx := context.Background()
	fake := &fakeKMS{master: secrets.NewRandomLocalKeys(), keyID: "arn:aws:kms:eu-west-1:123456789012:key/test"}
	for name, keys := range map[string]secrets.DataKeys{
		"kms":   secrets.KMSKeys{Client: fake, KeyID: fake.keyID},
		"local": secrets.NewRandomLocalKeys(),
	} {
		t.Run(name, func(t *testing.T) {
			value := make([]byte, 64)
			_, _ = rand.Read(value)
			s, err := secrets.Seal(ctx, keys, "acme", "GITHUB_TOKEN", value)
			if err != nil {
				t.Fatal(err)
			}
			for _, part := range [][]byte{s.DataKey, s.Ciphertext, s.Nonce} {
				if bytes.Contains(part, value) {
					t.Fatal("a stored part holds the value")
				}
			}
			got, err := secrets.Open(ctx, keys, "acme", "GITHUB_TOKEN", s)
			if err != nil || !bytes.Equal(got, value) {
				t.Fatalf("open: %v", err)
			}
			if _, err := secrets.Open(ctx, keys, "acme", "OTHER", s); err == nil {
				t.Fatal("opened under another name")
			}
			if _, err := secrets.Open(ctx, keys, "globex", "GITHUB_TOKEN", s); err == nil {
				t.Fatal("opened for another organization")
			}
			s2, _ := secrets.Seal(ctx, keys, "acme", "GITHUB_TOKEN", value)
			if bytes.Equal(s.DataKey, s2.DataKey) || bytes.Equal(s.Ciphertext, s2.Ciphertext) {
				t.Fatal("two seals share a data key or ciphertext")
			}
		})
	}
	if fake.generate != 2 || fake.decrypt < 3 {
		t.Fatalf("KMS calls: %d GenerateDataKey, %d Decrypt", fake.generate, fake.decrypt)
	}
	if fake.lastCtx["envlease:org"] != "acme" || fake.lastCtx["envlease:secret"] != "GITHUB_TOKEN" {
		t.Fatalf("encryption context %v", fake.lastCtx)
	}
	// A data key sealed by another KMS key is refused, not opened.
	s, _ := secrets.Seal(ctx, secrets.KMSKeys{Client: fake, KeyID: fake.keyID}, "acme", "X", []byte("v"))
	s.KeyID = "arn:aws:kms:eu-west-1:123456789012:key/other"
	if _, err := secrets.Open(ctx, secrets.KMSKeys{Client: fake, KeyID: fake.keyID}, "acme", "X", s); err == nil {
		t.Fatal("opened with the wrong key")
	}
}
