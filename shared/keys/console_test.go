package keys_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/keys"
)

type consoleCode struct {
	Code    string    `json:"code"`
	Expires time.Time `json:"expires"`
}

// askCode asks for a console sign-in code with token and returns it.
func askCode(t *testing.T, e *apitest.Env, token string) consoleCode {
	t.Helper()
	res := e.Do(http.MethodPost, "/v1/console/codes", token, map[string]any{})
	if res.Status != http.StatusCreated {
		t.Fatalf("ask for a code: %d %s", res.Status, res.Body)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the code's answer is cacheable")
	}
	var c consoleCode
	res.JSON(t, &c)
	return c
}

// A code is exchanged once for a new console token of the asking person,
// which expires, is listed with the person's tokens, and signs in as them.
func TestConsoleCodeExchangesOnce(t *testing.T) {
	e := newEnv(t)
	c := askCode(t, e, apitest.BobToken)
	if !strings.HasPrefix(c.Code, keys.PrefixConsoleCode) || !c.Expires.Equal(e.Clock.Now().Add(keys.ConsoleCodeLifetime)) {
		t.Fatalf("code %+v", c)
	}
	// A code is not a bearer token.
	if res := e.Do(http.MethodGet, "/v1/whoami", c.Code, nil); res.Status != http.StatusUnauthorized {
		t.Fatalf("the code as a bearer token: %d", res.Status)
	}
	e.Clock.Advance(30 * time.Second)
	res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code})
	if res.Status != http.StatusCreated || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("exchange: %d %s", res.Status, res.Body)
	}
	var out struct {
		Token  string `json:"token"`
		APIKey struct {
			ID      string    `json:"id"`
			Name    string    `json:"name"`
			Source  string    `json:"source"`
			Expires time.Time `json:"expires"`
			Owner   struct{ Kind, ID string }
		} `json:"apiKey"`
	}
	res.JSON(t, &out)
	if !strings.HasPrefix(out.Token, "els_cli_") || out.Token == apitest.BobToken || out.APIKey.Source != "console" ||
		out.APIKey.Name != keys.ConsoleTokenName || out.APIKey.Owner.ID != "bob" ||
		!out.APIKey.Expires.Equal(e.Clock.Now().Add(keys.ConsoleTokenLifetime)) {
		t.Fatalf("exchanged: %+v", out)
	}
	var who struct {
		Organization, User, Role string
	}
	if res := e.Do(http.MethodGet, "/v1/whoami", out.Token, nil); res.Status != http.StatusOK {
		t.Fatalf("whoami with the console token: %d", res.Status)
	} else {
		res.JSON(t, &who)
	}
	if who.Organization != "acme" || who.User != "bob" || who.Role != "member" {
		t.Fatalf("the console token acts as %+v", who)
	}
	if res := e.Do(http.MethodGet, "/v1/keys", apitest.BobToken, nil); !strings.Contains(string(res.Body), out.APIKey.ID) {
		t.Errorf("the console token is not in bob's listing: %s", res.Body)
	}

	// Spent: a second exchange is refused, the same as an unknown code.
	for _, code := range []string{c.Code, keys.PrefixConsoleCode + strings.Repeat("a", 43), "els_cli_x", ""} {
		res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": code})
		if res.Status != http.StatusUnauthorized {
			t.Errorf("exchange of %q: %d %s", code, res.Status, res.Body)
		}
	}

	// The console token stops by itself.
	e.Clock.Advance(keys.ConsoleTokenLifetime)
	if res := e.Do(http.MethodGet, "/v1/whoami", out.Token, nil); res.Status != http.StatusUnauthorized || !strings.Contains(string(res.Body), "expired") {
		t.Fatalf("whoami after the console token's end: %d %s", res.Status, res.Body)
	}
}

// Of many exchanges of one code at once, exactly one gets a token.
func TestConsoleCodeConcurrentExchanges(t *testing.T) {
	e := newEnv(t)
	c := askCode(t, e, apitest.AliceToken)
	const n = 8
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}).Status
		}()
	}
	wg.Wait()
	won := 0
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			won++
		case http.StatusUnauthorized:
		default:
			t.Errorf("exchange answered %d", s)
		}
	}
	if won != 1 {
		t.Fatalf("%d exchanges of one code succeeded (%v), want 1", won, statuses)
	}
}

func TestConsoleCodeRefusals(t *testing.T) {
	e := newEnv(t)

	// Expired: a minute is all a code has.
	c := askCode(t, e, apitest.BobToken)
	e.Clock.Advance(keys.ConsoleCodeLifetime)
	if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}); res.Status != http.StatusUnauthorized {
		t.Errorf("exchange of an expired code: %d %s", res.Status, res.Body)
	}

	// The asking token revoked before the exchange.
	var tok struct {
		Token  string         `json:"token"`
		APIKey map[string]any `json:"apiKey"`
	}
	e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"}).JSON(t, &tok)
	c = askCode(t, e, tok.Token)
	if res := e.Do(http.MethodDelete, "/v1/keys/"+tok.APIKey["id"].(string), apitest.BobToken, nil); res.Status != http.StatusOK {
		t.Fatalf("revoke: %d", res.Status)
	}
	if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}); res.Status != http.StatusUnauthorized || !strings.Contains(string(res.Body), "revoked") {
		t.Errorf("exchange after the asking token was revoked: %d %s", res.Status, res.Body)
	}

	// Only a person's CLI token asks: not an organization key, and not a
	// console token (a session could renew itself forever).
	var orgKey struct {
		Token string `json:"token"`
	}
	e.Do(http.MethodPost, "/v1/keys", apitest.AliceToken, map[string]any{"name": "ci"}).JSON(t, &orgKey)
	if res := e.Do(http.MethodPost, "/v1/console/codes", orgKey.Token, nil); res.Status != http.StatusForbidden {
		t.Errorf("an organization key asked for a code: %d %s", res.Status, res.Body)
	}
	c = askCode(t, e, apitest.AliceToken)
	var session struct {
		Token string `json:"token"`
	}
	e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}).JSON(t, &session)
	if res := e.Do(http.MethodPost, "/v1/console/codes", session.Token, nil); res.Status != http.StatusForbidden {
		t.Errorf("a console token asked for a code: %d %s", res.Status, res.Body)
	}
	// No token: 401.
	if res := e.Do(http.MethodPost, "/v1/console/codes", "", nil); res.Status != http.StatusUnauthorized {
		t.Errorf("no token asked for a code: %d", res.Status)
	}
}

// Refused exchanges count as failed authentications of the address: after
// ten, even a good code is refused from there (429), not from elsewhere.
func TestConsoleCodeExchangeFailuresBlock(t *testing.T) {
	e := newEnv(t)
	c := askCode(t, e, apitest.AliceToken)
	e.RemoteAddr = "198.51.100.7:4000"
	bad := keys.PrefixConsoleCode + strings.Repeat("b", 43)
	for i := range 10 {
		if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": bad}); res.Status != http.StatusUnauthorized {
			t.Fatalf("bad exchange %d: %d %s", i+1, res.Status, res.Body)
		}
	}
	if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}); res.Status != http.StatusTooManyRequests || res.Code() != "locked" {
		t.Fatalf("a good code from the blocked address: %d %s", res.Status, res.Body)
	}
	e.RemoteAddr = "198.51.100.8:4000"
	if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}); res.Status != http.StatusCreated {
		t.Fatalf("the good code from another address: %d %s", res.Status, res.Body)
	}
}

// A string not shaped like a code is refused without counting against the
// address: a page can send a visitor's browser such links in a loop, and
// must not get the visitor's address blocked.
func TestConsoleCodeMalformedDoesNotBlock(t *testing.T) {
	e := newEnv(t)
	c := askCode(t, e, apitest.AliceToken)
	e.RemoteAddr = "198.51.100.9:4000"
	for i := range 20 {
		if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": "junk"}); res.Status != http.StatusUnauthorized {
			t.Fatalf("malformed exchange %d: %d %s", i+1, res.Status, res.Body)
		}
	}
	if res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": c.Code}); res.Status != http.StatusCreated {
		t.Fatalf("a good code after malformed ones from the same address: %d %s", res.Status, res.Body)
	}
}

// A scoped or restricted CLI token that lives until revoked cannot buy a
// console token, which would carry every right of the person.
func TestConsoleCodeRefusedToLimitedTokens(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grant map[string]any
	}{
		{"scoped", map[string]any{"scopes": []string{"tokens:write"}}},
		{"restricted", map[string]any{"restrictions": map[string]any{"templates": []string{"web"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			body := map[string]any{"name": "limited"}
			for k, v := range tc.grant {
				body[k] = v
			}
			var tok struct {
				Token string `json:"token"`
			}
			res := e.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, body)
			if res.Status != http.StatusCreated {
				t.Fatalf("create the token: %d %s", res.Status, res.Body)
			}
			res.JSON(t, &tok)
			if res := e.Do(http.MethodPost, "/v1/console/codes", tok.Token, nil); res.Status != http.StatusForbidden {
				t.Fatalf("a %s token asked for a code: %d %s", tc.name, res.Status, res.Body)
			}
		})
	}
}

// The console token a code buys ends no later than the token that asked for
// it: an expiring token is refused a code outright, and a code that carries
// its maker's expiry (auth.Inherit's answer, stored on the code) buys a
// token capped by it, or nothing once it has passed.
func TestConsoleTokenNeverOutlivesItsMaker(t *testing.T) {
	e := newEnv(t)
	res := e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "short", "expiresIn": "10m"})
	var tok struct {
		Token string `json:"token"`
	}
	res.JSON(t, &tok)
	if res.Status != http.StatusCreated {
		t.Fatalf("token: %d %s", res.Status, res.Body)
	}
	if res := e.Do(http.MethodPost, "/v1/console/codes", tok.Token, nil); res.Status != http.StatusForbidden {
		t.Fatalf("a 10-minute token asked for a code: %d %s", res.Status, res.Body)
	}
	now := e.Clock.Now()
	for _, c := range []struct {
		name   string
		maker  time.Time
		status int
	}{
		{"maker expires in 10m", now.Add(10 * time.Minute), http.StatusCreated},
		{"maker has expired", now.Add(-time.Second), http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, hash := auth.NewToken(keys.PrefixConsoleCode)
			maker := c.maker.UTC()
			if err := e.Store.PutConsoleCode(context.Background(), domain.ConsoleCode{Hash: hash, OrgID: "acme", UserID: "bob",
				Role: domain.RoleMember, KeyHash: auth.HashToken(apitest.BobToken), Created: now,
				Expires: now.Add(keys.ConsoleCodeLifetime), TokenExpires: &maker}); err != nil {
				t.Fatal(err)
			}
			res := e.Do(http.MethodPost, "/v1/console/sessions", "", map[string]any{"code": code})
			if res.Status != c.status {
				t.Fatalf("exchange: %d %s, want %d", res.Status, res.Body, c.status)
			}
			if c.status != http.StatusCreated {
				return
			}
			var out struct {
				APIKey struct {
					Expires time.Time `json:"expires"`
				} `json:"apiKey"`
			}
			res.JSON(t, &out)
			if !out.APIKey.Expires.Equal(maker) {
				t.Fatalf("console token expires at %s, its maker at %s", out.APIKey.Expires, maker)
			}
		})
	}
}
