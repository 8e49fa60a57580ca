package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Grant is what a new token or key may do and for how long: scopes (nil
// for every right of its holder), restrictions on what it leases, and a
// lifetime such as "1h" (empty: none, unless the organization caps it).
type Grant struct {
	Scopes       []string             `json:"scopes,omitempty"`
	Restrictions *domain.Restrictions `json:"restrictions,omitempty"`
	ExpiresIn    string               `json:"expiresIn,omitempty"`
}

// CreateTokenWith issues a CLI token acting as the caller, limited by g.
func (c *Client) CreateTokenWith(ctx context.Context, name string, g Grant) (IssuedKey, error) {
	var out IssuedKey
	body := struct {
		Name   string `json:"name"`
		Source string `json:"source"`
		Grant
	}{name, "cli", g}
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tokens", body: body}, &out)
	return out, err
}

// CreateKeyWith issues an organization API key limited by g (admins only).
func (c *Client) CreateKeyWith(ctx context.Context, name string, g Grant) (IssuedKey, error) {
	var out IssuedKey
	body := struct {
		Name string `json:"name"`
		Grant
	}{name, g}
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/keys", body: body}, &out)
	return out, err
}

// ExchangeToken trades a CI job's OIDC identity token for a short-lived
// token of org, as an issuer the organization trusts allows. The client
// needs no token of its own for it.
func (c *Client) ExchangeToken(ctx context.Context, org, idToken string) (IssuedKey, error) {
	var out IssuedKey
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tokens/exchange",
		body: map[string]string{"organization": org, "token": idToken}}, &out)
	return out, err
}

// CreateIssuer trusts an OIDC issuer's CI identities (admins only).
func (c *Client) CreateIssuer(ctx context.Context, req domain.IssuerRequest) (domain.TrustedIssuer, error) {
	var out struct {
		Issuer domain.TrustedIssuer `json:"issuer"`
	}
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/issuers", body: req}, &out)
	return out.Issuer, err
}

// ListIssuers lists the organization's trusted issuers (admins only).
func (c *Client) ListIssuers(ctx context.Context) ([]domain.TrustedIssuer, error) {
	var out struct {
		Issuers []domain.TrustedIssuer `json:"issuers"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/issuers", retry: true}, &out)
	return out.Issuers, err
}

// DeleteIssuer stops trusting an issuer (admins only).
func (c *Client) DeleteIssuer(ctx context.Context, id string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/issuers/" + seg(id), retry: true}, nil)
	return err
}

// GitHubIDToken asks GitHub Actions for the job's OIDC identity token for
// audience, with the request URL and bearer token the runner gives a job
// that has `permissions: id-token: write` (ACTIONS_ID_TOKEN_REQUEST_URL and
// ACTIONS_ID_TOKEN_REQUEST_TOKEN).
func GitHubIDToken(ctx context.Context, hc *http.Client, requestURL, requestToken, audience string) (string, error) {
	u, err := url.Parse(requestURL)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("ACTIONS_ID_TOKEN_REQUEST_URL is not a URL")
	}
	q := u.Query()
	q.Set("audience", audience)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+requestToken)
	req.Header.Set("Accept", "application/json")
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask GitHub Actions for an identity token: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ask GitHub Actions for an identity token: %s (does the job have permissions: id-token: write?)", res.Status)
	}
	var out struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Value == "" {
		return "", fmt.Errorf("GitHub Actions answered no identity token")
	}
	return out.Value, nil
}
