package client

import (
	"context"
	"net/http"
	"time"
)

// TunnelTicket opens a tunnel to one environment's exports: dial URL (the
// node agent's WebSocket endpoint) with Ticket as the bearer token, before
// Expires. Package tunnel does this (tunnel.Forward carries connections to
// each export's listen address through it, as envlease port-forward does).
type TunnelTicket struct {
	// URL is the agent's tunnel endpoint, a ws:// or wss:// URL.
	URL string `json:"url"`
	// Ticket is the bearer token of the WebSocket upgrade, signed for this
	// environment's node and the environment's export targets.
	Ticket string `json:"ticket"`
	// Expires is when the agent stops accepting the ticket.
	Expires time.Time `json:"expires"`
}

// CreateTunnel asks for a tunnel ticket for a ready environment. Nothing is
// stored (a ticket is a signature), so it is retried after a 502 or 503.
func (c *Client) CreateTunnel(ctx context.Context, id string) (TunnelTicket, error) {
	var out TunnelTicket
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/tunnel", retry: true}, &out)
	return out, err
}
