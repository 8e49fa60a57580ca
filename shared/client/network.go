package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// NetworkRecord is one line of an environment's network log (docs/nodes.md,
// "Network boundary").
type NetworkRecord struct {
	Time       time.Time `json:"time"`
	Proto      string    `json:"proto"`
	Addr       string    `json:"addr,omitempty"`
	Port       uint16    `json:"port,omitempty"`
	Name       string    `json:"name,omitempty"`
	NameFrom   string    `json:"nameFrom,omitempty"`
	Type       string    `json:"type,omitempty"`
	Answers    []string  `json:"answers,omitempty"`
	Rule       string    `json:"rule"`
	Verdict    string    `json:"verdict"`
	Error      string    `json:"error,omitempty"`
	Sent       int64     `json:"sent"`
	Received   int64     `json:"received"`
	DurationMs float64   `json:"durationMs"`
	Suppressed int64     `json:"suppressed,omitempty"`
}

// EnvironmentNetworkLog asks where an environment's network log is (GET
// /v1/environments/{id}/network-log).
func (c *Client) EnvironmentNetworkLog(ctx context.Context, id string) (Logs, error) {
	var out Logs
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id) + "/network-log", retry: true}, &out)
	return out, err
}

// ReadNetworkLog writes an environment's network log to w, one JSON record
// a line: live from its node while it runs (with Follow until it ends,
// reconnecting at the offset it reached if the connection drops), the kept
// artifact once it ended.
func (c *Client) ReadNetworkLog(ctx context.Context, id string, opt LogOptions, w io.Writer) error {
	var off int64 = -1
	for tries := 0; ; tries++ {
		l, err := c.EnvironmentNetworkLog(ctx, id)
		if err != nil {
			var ae *Error
			if off >= 0 && errors.As(err, &ae) && ae.Status == http.StatusConflict {
				return nil // it ended while followed
			}
			return err
		}
		if l.Kept != nil {
			if off >= 0 {
				return nil // it ended while followed
			}
			return c.readKept(ctx, l.Kept, w)
		}
		if l.Live == nil {
			return fmt.Errorf("environment %s: the API named no network log", id)
		}
		next, err := c.readLive(ctx, l.Live, id, off, opt, w)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrLogNotLive):
			return fmt.Errorf("environment %s has no network log on its node (its template's network is not open or rules, or it ended)", id)
		case ctx.Err() != nil || !opt.Follow || next < 0 || tries >= 20:
			return err
		}
		off = next
		if err := c.sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// NetworkPatch changes an environment's own network layer (PATCH
// /v1/environments/{id}/network): each list set replaces the
// environment's, each nil one is kept.
type NetworkPatch struct {
	Allow *[]string `json:"allow,omitempty"`
	Deny  *[]string `json:"deny,omitempty"`
}

// SetNetwork replaces a running environment's own network layer; its node
// applies it at once.
func (c *Client) SetNetwork(ctx context.Context, id string, patch NetworkPatch) (domain.Environment, error) {
	var out struct {
		Environment domain.Environment `json:"environment"`
	}
	_, err := c.do(ctx, call{method: http.MethodPatch, path: "/v1/environments/" + seg(id) + "/network", body: patch}, &out)
	return out.Environment, err
}
