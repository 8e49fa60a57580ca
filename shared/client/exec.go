package client

import (
	"context"
	"net/http"
	"time"
)

// ExecRequest is a command to run inside an environment.
type ExecRequest struct {
	// Command is the argv; the API records its first word (never its
	// arguments) in the environment.exec event.
	Command []string `json:"command"`
	// TTY asks for a pseudo-terminal.
	TTY bool `json:"tty"`
}

// ExecTicket runs one command inside an environment: open URL (the node
// agent's endpoint, as for a tunnel) with Ticket as the bearer token before
// Expires. Package execsession does this (execsession.Exec asks for the
// ticket, runs the command and touches the environment meanwhile).
type ExecTicket struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
}

// CreateExec asks for an exec ticket for a ready environment. Each ticket
// is recorded as an event, so a failed request is not retried on its own
// (a retry after a lost answer would record the exec twice).
func (c *Client) CreateExec(ctx context.Context, id string, req ExecRequest) (ExecTicket, error) {
	var out ExecTicket
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/environments/" + seg(id) + "/exec", body: req}, &out)
	return out, err
}
