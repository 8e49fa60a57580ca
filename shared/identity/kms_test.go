package identity_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/envlease/envlease/shared/identity"
)

// fakeKMS stands in for KMS behind the SDK's own request and answer types
// (identity.KMSAPI): it holds P-256 keys by id and signs digests as KMS
// does (DER), refusing what KMS would refuse. No AWS is reached.
type fakeKMS struct {
	keys  map[string]*ecdsa.PrivateKey
	signs map[string]int
}

func newFakeKMS(t *testing.T, ids ...string) *fakeKMS {
	f := &fakeKMS{keys: map[string]*ecdsa.PrivateKey{}, signs: map[string]int{}}
	for _, id := range ids {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		f.keys[id] = k
	}
	return f
}

func (f *fakeKMS) GetPublicKey(_ context.Context, in *kms.GetPublicKeyInput, _ ...func(*kms.Options)) (*kms.GetPublicKeyOutput, error) {
	k, ok := f.keys[aws.ToString(in.KeyId)]
	if !ok {
		return nil, &types.NotFoundException{Message: aws.String("no such key")}
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, err
	}
	return &kms.GetPublicKeyOutput{KeyId: in.KeyId, PublicKey: der, KeySpec: types.KeySpecEccNistP256,
		KeyUsage: types.KeyUsageTypeSignVerify, SigningAlgorithms: []types.SigningAlgorithmSpec{types.SigningAlgorithmSpecEcdsaSha256}}, nil
}

func (f *fakeKMS) Sign(_ context.Context, in *kms.SignInput, _ ...func(*kms.Options)) (*kms.SignOutput, error) {
	k, ok := f.keys[aws.ToString(in.KeyId)]
	if !ok {
		return nil, &types.NotFoundException{Message: aws.String("no such key")}
	}
	if in.MessageType != types.MessageTypeDigest || in.SigningAlgorithm != types.SigningAlgorithmSpecEcdsaSha256 || len(in.Message) != 32 {
		return nil, errors.New("fake KMS: want a SHA-256 digest signed with ECDSA_SHA_256")
	}
	sig, err := ecdsa.SignASN1(rand.Reader, k, in.Message)
	if err != nil {
		return nil, err
	}
	f.signs[aws.ToString(in.KeyId)]++
	return &kms.SignOutput{KeyId: in.KeyId, Signature: sig, SigningAlgorithm: in.SigningAlgorithm}, nil
}

// The KMS signer's tokens verify with go-oidc; only the current key signs;
// the next and the retired key (within the longest lifetime) are
// published; one retired longer ago is not.
func TestKMSSigner(t *testing.T) {
	f := newFakeKMS(t, "alias/current", "alias/next", "alias/old", "alias/older")
	retired, err := identity.ParseRetired("alias/old=2026-03-14T08:00:00Z, alias/older=2026-03-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	s := newIssuerStack(t, identity.NewKMSKeys(f, identity.KMSConfig{Current: "alias/current", Next: "alias/next", Retired: retired}))
	ctx := context.Background()
	out, err := s.svc.Tokens(ctx, leased(s.clock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.verifier(t, "sts.amazonaws.com").Verify(ctx, out.Tokens[0].Token); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if f.signs["alias/current"] != 2 || len(f.signs) != 1 {
		t.Errorf("signs %v, want two by the current key alone", f.signs)
	}
	set, err := s.issuer.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 3 {
		t.Errorf("JWKS has %d keys, want current, next and the key retired an hour ago", len(set.Keys))
	}
	if _, err := identity.ParseRetired("alias/old"); err == nil {
		t.Error("a retired key without its time was taken")
	}
}
