package federation

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

// unverifiedIssuer reads the iss claim of an identity token before any
// check, only to pick the registrations and keys to check it with: nothing
// it says is trusted until go-oidc has verified the token. A token whose
// algorithm is not accepted ("none", HMAC) is refused here, before any
// fetch.
func unverifiedIssuer(raw string) (string, error) {
	jws, err := jose.ParseSigned(raw, algorithms)
	if err != nil {
		if alg := headerAlg(raw); alg != "" && !accepted(alg) {
			return "", errAlgorithm
		}
		return "", errMalformed
	}
	if len(jws.Signatures) != 1 {
		return "", errMalformed
	}
	var claims struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &claims); err != nil || claims.Issuer == "" {
		return "", errMalformed
	}
	return claims.Issuer, nil
}

// headerAlg is the alg a compact JWS's header names, for the refusal's words.
func headerAlg(raw string) string {
	head, _, ok := strings.Cut(raw, ".")
	if !ok {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(b, &h) != nil {
		return ""
	}
	return h.Alg
}

func accepted(alg string) bool {
	for _, a := range algorithms {
		if string(a) == alg {
			return true
		}
	}
	return false
}
