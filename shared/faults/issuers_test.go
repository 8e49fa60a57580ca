package faults_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/envlease/envlease/shared/apitest"
)

// localIssuer is an OIDC issuer served by the test, with one signing key,
// and the id of acme's registration of it.
type localIssuer struct {
	srv    *httptest.Server
	signer jose.Signer
	id     string
}

// issuers keeps each stack's local issuer while its subtest runs.
var issuers sync.Map // *stack -> *localIssuer

func (s *stack) localIssuer() *localIssuer {
	if v, ok := issuers.Load(s); ok {
		return v.(*localIssuer)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		s.T.Fatal(err)
	}
	li := &localIssuer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": li.srv.URL, "jwks_uri": li.srv.URL + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	li.srv = httptest.NewServer(mux)
	// The issuer lives as long as the subtest that started it; the next
	// one starts (and registers) its own.
	s.T.Cleanup(func() {
		li.srv.Close()
		issuers.Delete(s)
	})
	li.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
	if err != nil {
		s.T.Fatal(err)
	}
	li.id = s.must(http.MethodPost, "/v1/issuers", apitest.AliceToken, s.issuerBody(li.srv.URL), 201)["issuer"].(map[string]any)["id"].(string)
	issuers.Store(s, li)
	return li
}

func (s *stack) issuerBody(url string) map[string]any {
	return map[string]any{"name": "ci", "url": url, "audience": "envlease",
		"conditions": map[string]string{"repository": "acme/app"}, "scopes": []string{"environments:lease"}}
}

// idToken is a good identity token of the local issuer, now.
func (s *stack) idToken() string {
	li := s.localIssuer()
	now := s.Clock.Now()
	b, _ := json.Marshal(map[string]any{"iss": li.srv.URL, "aud": "envlease", "sub": "ci", "repository": "acme/app",
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()})
	obj, err := li.signer.Sign(b)
	if err != nil {
		s.T.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		s.T.Fatal(err)
	}
	return tok
}

// issuerEndpoints are the trusted issuers and the token exchange.
func issuerEndpoints() []endpoint {
	return []endpoint{
		{name: "POST /v1/issuers", status: 201, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/issuers", token: apitest.AliceToken, body: s.issuerBody(s.localIssuer().srv.URL)}
		}, cleanup: func(s *stack, res *apitest.Response) {
			id := res.Map(s.T)["issuer"].(map[string]any)["id"].(string)
			s.must(http.MethodDelete, "/v1/issuers/"+id, apitest.AliceToken, nil, 204)
		}},
		{name: "GET /v1/issuers", status: 200, prepare: func(*stack) request {
			return request{method: "GET", path: "/v1/issuers", token: apitest.AliceToken}
		}},
		{name: "DELETE /v1/issuers/{id}", status: 204, prepare: func(s *stack) request {
			id := s.must(http.MethodPost, "/v1/issuers", apitest.AliceToken, s.issuerBody(s.localIssuer().srv.URL), 201)["issuer"].(map[string]any)["id"].(string)
			return request{method: "DELETE", path: "/v1/issuers/" + id, token: apitest.AliceToken}
		}, retried: func(s *stack, res *apitest.Response) {
			// The delete may have happened before the fault: then it is gone.
			if res.Status != 204 && res.Status != 404 {
				s.T.Fatalf("delete after the fault cleared: %d %s", res.Status, res.Body)
			}
		}},
		{name: "POST /v1/tokens/exchange", status: 201, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/tokens/exchange", body: map[string]any{"organization": "acme", "token": s.idToken()}}
		}},
	}
}
