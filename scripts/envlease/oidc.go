package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// In CI, envlease needs no stored secret: with no token configured, it
// exchanges the job's OIDC identity token for a short-lived envlease token
// (docs/ci.md). ENVLEASE_OIDC holds the identity token (GitLab's id_tokens,
// say), or "github" to ask GitHub Actions for one; GitHub Actions is also
// detected by its ACTIONS_ID_TOKEN_REQUEST_URL and _TOKEN. ENVLEASE_ORG
// names the organization; ENVLEASE_OIDC_AUDIENCE the audience asked of
// GitHub (default "envlease"). The exchanged token is kept in the user's
// cache folder until a minute before it expires, so a job's commands share
// one exchange.
const defaultAudience = "envlease"

// ciIdentity returns the job's identity token and a key for its cache
// entry, or "" when this is not such a CI.
func (a *app) ciIdentity(ctx context.Context) (idToken, cacheKey string, err error) {
	v := a.getenv("ENVLEASE_OIDC")
	reqURL, reqTok := a.getenv("ACTIONS_ID_TOKEN_REQUEST_URL"), a.getenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
	switch {
	case v != "" && v != "github":
		return v, v, nil
	case v == "github" || (v == "" && reqURL != "" && reqTok != ""):
		if reqURL == "" || reqTok == "" {
			return "", "", usagef("ENVLEASE_OIDC=github, but ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN are not set: give the job permissions: id-token: write")
		}
		aud := a.getenv("ENVLEASE_OIDC_AUDIENCE")
		if aud == "" {
			aud = defaultAudience
		}
		tok, err := client.GitHubIDToken(ctx, nil, reqURL, reqTok, aud)
		// The request token is the job's: one cache entry per job.
		return tok, "github:" + reqTok + ":" + aud, err
	}
	return "", "", nil
}

// ciToken exchanges the CI job's identity for a token of the API at url,
// or returns "" when there is no CI identity (or no ENVLEASE_ORG to
// exchange it with, where it was only detected).
func (a *app) ciToken(url string) (string, error) {
	org := a.getenv("ENVLEASE_ORG")
	explicit := a.getenv("ENVLEASE_OIDC") != ""
	if org == "" {
		if explicit {
			return "", usagef("ENVLEASE_OIDC is set: ENVLEASE_ORG must name the organization to exchange it with")
		}
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idToken, key, err := a.ciIdentity(ctx)
	if err != nil || idToken == "" {
		return "", err
	}
	key = cacheKey(url, org, key)
	if tok := readCICache(key); tok != "" {
		return tok, nil
	}
	c, err := a.newClient(url, "")
	if err != nil {
		return "", usagef("%v", err)
	}
	issued, err := c.ExchangeToken(ctx, org, idToken)
	if err != nil {
		return "", &authError{msg: "exchanging the CI job's identity token: " + err.Error()}
	}
	writeCICache(key, issued)
	return issued.Token, nil
}

func cacheKey(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

type ciCacheEntry struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

func ciCachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "envlease", "ci-tokens.json"), nil
}

func readCICache(key string) string {
	path, err := ciCachePath()
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var m map[string]ciCacheEntry
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	if e, ok := m[key]; ok && time.Until(e.Expires) > time.Minute {
		return e.Token
	}
	return ""
}

// writeCICache keeps an exchanged token (mode 0600), dropping expired
// entries. A cache that cannot be written only costs another exchange.
func writeCICache(key string, issued client.IssuedKey) {
	if issued.APIKey.Expires == nil {
		return
	}
	path, err := ciCachePath()
	if err != nil {
		return
	}
	m := map[string]ciCacheEntry{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &m)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return
	}
	for k, e := range m {
		if time.Now().After(e.Expires) {
			delete(m, k)
		}
	}
	m[key] = ciCacheEntry{Token: issued.Token, Expires: *issued.APIKey.Expires}
	b, _ := json.Marshal(m)
	if os.MkdirAll(filepath.Dir(path), 0o700) != nil {
		return
	}
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, path)
	}
}

// apiURL is the API's URL without needing a token: ENVLEASE_URL, else the
// profile's.
func (a *app) apiURL() (string, error) {
	if v := a.getenv("ENVLEASE_URL"); v != "" {
		return v, nil
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return "", err
	}
	name, err := a.profileName(cfg)
	if err != nil {
		return "", err
	}
	if p := cfg.Profiles[name]; p != nil && p.URL != "" {
		return p.URL, nil
	}
	return "", usagef("no API URL: set ENVLEASE_URL or run 'envlease login --url URL'")
}

func (a *app) tokensExchangeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "exchange",
		Short: "Exchange this CI job's OIDC identity for a short-lived token",
		Long: `Trades the CI job's OIDC identity token for a short-lived envlease token, as an
issuer the organization trusts allows ('envlease issuers'), and prints it.
Other commands do this by themselves when no token is configured; use this
to hand the token to something else. The identity token is ENVLEASE_OIDC, or
GitHub Actions' (ENVLEASE_OIDC=github, or detected); ENVLEASE_ORG names the
organization.`,
		Example: `  export ENVLEASE_TOKEN=$(envlease tokens exchange)`,
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			url, err := a.apiURL()
			if err != nil {
				return err
			}
			org := a.getenv("ENVLEASE_ORG")
			if org == "" {
				return usagef("ENVLEASE_ORG must name the organization")
			}
			idToken, _, err := a.ciIdentity(ctx)
			if err != nil {
				return err
			}
			if idToken == "" {
				return usagef("no CI identity: set ENVLEASE_OIDC to the job's identity token, or run in GitHub Actions with permissions: id-token: write")
			}
			c, err := a.newClient(url, "")
			if err != nil {
				return usagef("%v", err)
			}
			issued, err := c.ExchangeToken(ctx, org, idToken)
			if err != nil {
				return err
			}
			return a.printIssued("short-lived token", issued)
		}),
	}
}

// scopesCell is a key's scopes for a table: "*" for every right.
func scopesCell(k domain.APIKey) string {
	if k.Scopes == nil {
		return "*"
	}
	s := strings.Join(k.Scopes, ",")
	if !k.Restrictions.Empty() {
		s += " (restricted)"
	}
	return s
}
