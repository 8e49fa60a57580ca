package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/nodes"
)

// Client speaks the node API with a node credential.
type Client struct {
	base  string
	token string
	http  *http.Client
	agent string
}

// NewClient returns a client of the API at base (http://host:port, no path).
func NewClient(base, token string, hc *http.Client, agent string) *Client {
	if hc == nil {
		// No overall timeout: claims long-poll; every call passes a context.
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: hc, agent: agent}
}

// APIError is an error answer of the API.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// statusOf returns the HTTP status of an API error, or 0.
func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", c.agent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return res.StatusCode, err
	}
	if res.StatusCode >= 400 {
		var eb struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		_ = json.Unmarshal(raw, &eb)
		return res.StatusCode, &APIError{Status: res.StatusCode, Code: eb.Code, Message: eb.Error}
	}
	if out != nil && res.StatusCode != http.StatusNoContent && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return res.StatusCode, nil
}

// Register registers a new node.
func (c *Client) Register(ctx context.Context, req nodes.RegisterRequest) (nodes.Registered, error) {
	var out nodes.Registered
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes", req, &out)
	return out, err
}

// Heartbeat sends a heartbeat naming the environments the node runs.
func (c *Client) Heartbeat(ctx context.Context, node string, ids, active []string, opened []nodes.PreviewOpened) (nodes.Beat, error) {
	var out nodes.Beat
	if ids == nil {
		ids = []string{}
	}
	body := map[string]any{"environments": ids}
	if len(active) > 0 {
		body["active"] = active // environments its preview links kept busy
	}
	if len(opened) > 0 {
		body["opened"] = opened
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/heartbeat", body, &out)
	return out, err
}

// Claim long-polls for a pending environment for up to wait; nil means none.
func (c *Client) Claim(ctx context.Context, node string, wait time.Duration) (*nodes.Claimed, error) {
	var out nodes.Claimed
	status, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/claim?wait="+url.QueryEscape(wait.String()), nil, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// Report reports an environment's state.
func (c *Client) Report(ctx context.Context, node, env string, r nodes.Report) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/environments/"+url.PathEscape(env)+"/report", r, nil)
	return err
}

// Deregister takes the node out of its pool.
func (c *Client) Deregister(ctx context.Context, node string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(node), nil, nil)
	return err
}

// PreviewRoute asks where a preview link whose token this node signed goes
// now (its environment paused, or runs elsewhere): the API wakes a paused
// one and answers the link on the node that runs it, or 503 waking or
// no_node, or 410 when the link opens nothing any more.
func (c *Client) PreviewRoute(ctx context.Context, node, env, preview, token string) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/environments/"+url.PathEscape(env)+
		"/previews/"+url.PathEscape(preview)+"/route", map[string]string{"token": token}, &out)
	return out.URL, err
}
