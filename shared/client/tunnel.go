package client

import (
	"context"
	"net/http"
	"time"
)

// TunnelTicket opens a tunnel to one environment's exports: dial URL (the
// node agent's WebSocket endpoint) with Ticket as the bearer token, before
// Expires.
type TunnelTicket struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
}

// CreateTunnel asks for a tunnel ticket for a ready environment. Nothing is
// stored (a ticket is a signature), so it is retried after a 502 or 503.
func (c *Client) CreateTunnel(ctx context.Context, id string) (TunnelTicket, error) {
	var out TunnelTicket
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/tunnel", retry: true}, &out)
	return out, err
}
