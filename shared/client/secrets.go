package client

import (
	"context"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
)

// SetSecret sets (or replaces) an organization secret's value (admins,
// scope secrets:write). The answer is its record, never the value.
func (c *Client) SetSecret(ctx context.Context, name, value string) (domain.Secret, error) {
	var out struct {
		Secret domain.Secret `json:"secret"`
	}
	// A PUT sets the same value again: safe to repeat.
	_, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/secrets/" + seg(name), body: map[string]string{"value": value}, retry: true}, &out)
	return out.Secret, err
}

// ListSecrets lists the organization's secrets: names, who set them, when,
// and the templates that bind them.
func (c *Client) ListSecrets(ctx context.Context) ([]domain.Secret, error) {
	var out struct {
		Secrets []domain.Secret `json:"secrets"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/secrets", retry: true}, &out)
	return out.Secrets, err
}

// GetSecret shows one secret's record.
func (c *Client) GetSecret(ctx context.Context, name string) (domain.Secret, error) {
	var out struct {
		Secret domain.Secret `json:"secret"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/secrets/" + seg(name), retry: true}, &out)
	return out.Secret, err
}

// DeleteSecret deletes a secret (admins, scope secrets:write).
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/secrets/" + seg(name), retry: true}, nil)
	return err
}
