package identity_test

import (
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// signedBy is the kid of a compact JWS's one signature.
func signedBy(t *testing.T, tok string) string {
	t.Helper()
	j, err := jose.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	return j.Signatures[0].Header.KeyID
}
