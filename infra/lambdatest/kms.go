package lambdatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// KMS serves the two KMS calls an identity function makes, GetPublicKey and
// Sign, over KMS's JSON protocol, with one ECC_NIST_P256 signing key
// whatever the key id (the stack's identity key); every call is recorded.
// Anything else is refused as KMS would refuse an action it does not know.
func (r *Recorder) KMS(fn string) *httptest.Server {
	var once sync.Once
	var key *ecdsa.PrivateKey
	var keyErr error
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "TrentService.")
		r.add(fn, "kms:"+op)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		once.Do(func() { key, keyErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader) })
		fail := func(typ, msg string) {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
		}
		if keyErr != nil {
			fail("KMSInternalException", keyErr.Error())
			return
		}
		var in struct {
			KeyId            string
			Message          []byte
			MessageType      string
			SigningAlgorithm string
		}
		if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
			fail("ValidationException", err.Error())
			return
		}
		switch op {
		case "GetPublicKey":
			der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
			if err != nil {
				fail("KMSInternalException", err.Error())
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"KeyId": in.KeyId, "PublicKey": der, "KeySpec": "ECC_NIST_P256",
				"KeyUsage": "SIGN_VERIFY", "SigningAlgorithms": []string{"ECDSA_SHA_256"}})
		case "Sign":
			if in.MessageType != "DIGEST" || in.SigningAlgorithm != "ECDSA_SHA_256" || len(in.Message) != 32 {
				fail("ValidationException", "a SHA-256 digest signed with ECDSA_SHA_256 is served")
				return
			}
			sig, err := ecdsa.SignASN1(rand.Reader, key, in.Message)
			if err != nil {
				fail("KMSInternalException", err.Error())
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"KeyId": in.KeyId, "Signature": sig, "SigningAlgorithm": in.SigningAlgorithm})
		default:
			fail("UnsupportedOperationException", "only GetPublicKey and Sign are served")
		}
	}))
}
