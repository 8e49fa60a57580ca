package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// MaxWait is the longest one wait request is held by the service; longer
// waits are several requests.
const MaxWait = 8 * time.Second

// WaitReady reads the environment once it is ready or can no longer become
// ready (failed, stopping, stopped), or when timeout (at most MaxWait) has
// passed, whichever comes first: one request that the service answers as
// soon as the state changes. The answer is the environment as it is then.
func (c *Client) WaitReady(ctx context.Context, id string, timeout time.Duration) (domain.Environment, error) {
	return c.wait(ctx, id, url.Values{"wait": {"ready"}}, timeout)
}

// WaitChange reads the environment once its state is no longer from, or
// when timeout (at most MaxWait) has passed.
func (c *Client) WaitChange(ctx context.Context, id string, from domain.State, timeout time.Duration) (domain.Environment, error) {
	return c.wait(ctx, id, url.Values{"wait": {"change"}, "state": {string(from)}}, timeout)
}

func (c *Client) wait(ctx context.Context, id string, q url.Values, timeout time.Duration) (domain.Environment, error) {
	timeout = min(max(timeout, time.Millisecond), MaxWait)
	q.Set("timeout", timeout.Round(time.Millisecond).String())
	var out domain.Environment
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id), query: q, retry: true}, &out)
	return out, err
}
