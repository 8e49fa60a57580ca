package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/envlease/envlease/shared/logline"
)

// Logs says where an environment's log is (GET /v1/environments/{id}/logs):
// Live while it runs (read it from its node), Kept once it ended.
type Logs struct {
	Environment string   `json:"environment"`
	State       string   `json:"state"`
	Live        *LiveLog `json:"live,omitempty"`
	Kept        *KeptLog `json:"kept,omitempty"`
}

// LiveLog is the node's live log endpoint and the ticket that opens it.
type LiveLog struct {
	URL     string    `json:"url"`
	Ticket  string    `json:"ticket"`
	Expires time.Time `json:"expires"`
}

// KeptLog is the artifact that keeps an ended environment's log, with a
// signed download link.
type KeptLog struct {
	Artifact string     `json:"artifact"`
	Size     int64      `json:"size"`
	URL      string     `json:"url,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
}

// EnvironmentLogs asks where an environment's log is. Nothing is stored, so
// it is retried after a 502 or 503.
func (c *Client) EnvironmentLogs(ctx context.Context, id string) (Logs, error) {
	var out Logs
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/environments/" + seg(id) + "/logs", retry: true}, &out)
	return out, err
}

// LogOptions choose what ReadLogs reads.
type LogOptions struct {
	// Follow keeps reading a running environment's log until it ends.
	Follow bool
	// Since, when set, starts a live log at what was written that long ago
	// (a kept log has no times: it is read whole).
	Since time.Duration
}

// ErrLogNotLive says the node no longer serves the log (the environment
// ended between the answer and the read): ask again for the kept one.
var ErrLogNotLive = errors.New("the environment's log is no longer served by its node")

// ReadLogs writes an environment's log to w: its live log from its node
// while it runs (with Follow, until it ends, reconnecting with the offset it
// reached if the connection drops), its kept log once it ended. It reports
// the Logs answer it read last.
func (c *Client) ReadLogs(ctx context.Context, id string, opt LogOptions, w io.Writer) (Logs, error) {
	var off int64 = -1
	for tries := 0; ; tries++ {
		l, err := c.EnvironmentLogs(ctx, id)
		if err != nil {
			return l, err
		}
		if l.Kept != nil {
			if off >= 0 {
				// It ended while followed: what was followed is all there is.
				return l, nil
			}
			return l, c.readKept(ctx, l.Kept, w)
		}
		if l.Live == nil {
			return l, fmt.Errorf("environment %s: the API named no log", id)
		}
		next, err := c.readLive(ctx, l.Live, id, off, opt, w)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, ErrLogNotLive) && off < 0 && tries < 3:
			// Ended between the two requests: its kept log is on the way.
			if err := c.sleep(ctx, time.Second); err != nil {
				return l, err
			}
			continue
		case ctx.Err() != nil || !opt.Follow || next < 0 || tries >= 20:
			return l, err
		}
		off = next
		if err := c.sleep(ctx, time.Second); err != nil {
			return l, err
		}
	}
}

// readLive reads the node's live log from off (< 0: by opt.Since, or from
// its first byte kept), and says the offset it reached (-1: none).
func (c *Client) readLive(ctx context.Context, live *LiveLog, id string, off int64, opt LogOptions, w io.Writer) (int64, error) {
	q := url.Values{"env": {id}}
	switch {
	case off >= 0:
		q.Set("offset", strconv.FormatInt(off, 10))
	case opt.Since > 0:
		q.Set("since", opt.Since.String())
	}
	if opt.Follow {
		q.Set("follow", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, live.URL+"?"+q.Encode(), nil)
	if err != nil {
		return off, err
	}
	req.Header.Set("Authorization", "Bearer "+live.Ticket)
	req.Header.Set("User-Agent", c.userAgent)
	// A follow lasts as long as the environment: no overall timeout.
	res, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return off, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return off, ErrLogNotLive
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		return off, fmt.Errorf("live log: %s: %s", res.Status, b)
	}
	start, _ := strconv.ParseInt(res.Header.Get("Envlease-Log-Offset"), 10, 64)
	if cut := res.Header.Get("Envlease-Log-Cut"); cut != "" && off >= 0 {
		_, _ = io.WriteString(w, "\n"+logline.Note("[envlease] "+cut+" bytes of the log were cut before this follower read them"))
	}
	n, err := io.Copy(w, res.Body)
	return start + n, err
}

func (c *Client) readKept(ctx context.Context, k *KeptLog, w io.Writer) error {
	if k.URL == "" {
		return fmt.Errorf("the log is kept as artifact %s; download it with its link", k.Artifact)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.URL, nil)
	if err != nil {
		return err
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("kept log %s: %s", k.Artifact, res.Status)
	}
	_, err = io.Copy(w, res.Body)
	return err
}
