package client

import (
	"context"
	"net/http"

	"github.com/envlease/envlease/shared/domain"
)

// Preview is a preview link as the API shows it: URL is "" once it no
// longer opens.
type Preview struct {
	domain.Preview
	URL string `json:"url"`
}

// CreatePreview makes a preview link to an export of a ready environment;
// export "" picks the only one, expires "" takes the service's default.
func (c *Client) CreatePreview(ctx context.Context, id, export, expires string) (Preview, error) {
	var out Preview
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/previews",
		body: map[string]string{"export": export, "expires": expires}}, &out)
	return out, err
}

// Previews lists an environment's preview links.
func (c *Client) Previews(ctx context.Context, id string) ([]Preview, error) {
	var out struct {
		Previews []Preview `json:"previews"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id) + "/previews", retry: true}, &out)
	return out.Previews, err
}

// RevokePreview revokes one.
func (c *Client) RevokePreview(ctx context.Context, id, preview string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/environments/" + seg(id) + "/previews/" + seg(preview), retry: true}, nil)
	return err
}
