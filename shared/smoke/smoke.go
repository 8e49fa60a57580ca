// Package smoke is the end-to-end check an operator runs against a deployed
// stack (scripts/smoke) and the tests run against the local stacks: with an
// admin's token it issues a CLI token of its own, leases an environment and
// waits for a node of the pool to make it ready, pushes and pulls an
// artifact, reads the events, deletes the environment and revokes its token.
package smoke

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// Config says where and as whom the smoke test runs.
type Config struct {
	// URL is the API's base URL.
	URL string
	// Token is an organization admin's token (kept off the command line).
	Token string
	// Template to lease; empty: the organization's first template.
	Template string
	// Pool to lease on; empty: the template's first pool.
	Pool string
	// ReadyTimeout bounds the wait for a node to make the lease ready.
	ReadyTimeout time.Duration
	// ArtifactSize is the size of the artifact round trip, in bytes.
	ArtifactSize int64
	// Log receives one line per step; nil discards.
	Log io.Writer
	// Options are passed to every client (tests give their HTTP client).
	Options []client.Option
}

// Report is what a run found.
type Report struct {
	Environment string
	ReadyIn     time.Duration
	Artifact    string
	Events      int
}

// Run runs the steps in order and stops at the first that fails. What it
// created is cleaned up on the way out: the environment is deleted and the
// token it issued is revoked, even after a failure.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	step := func(format string, a ...any) { fmt.Fprintf(logw, "smoke: "+format+"\n", a...) }
	if cfg.URL == "" || cfg.Token == "" {
		return rep, errors.New("smoke: URL and an admin token are required")
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 5 * time.Minute
	}
	if cfg.ArtifactSize <= 0 {
		cfg.ArtifactSize = 1 << 20
	}
	admin, err := client.New(cfg.URL, cfg.Token, cfg.Options...)
	if err != nil {
		return rep, err
	}
	who, err := admin.Whoami(ctx)
	if err != nil {
		return rep, fmt.Errorf("whoami with the admin token: %w", err)
	}
	if who.Role != domain.RoleAdmin {
		return rep, fmt.Errorf("the token is a %s's of %s: the smoke test needs an admin's", who.Role, who.Organization)
	}
	step("admin token is %s's in organization %s", who.User, who.Organization)

	issued, err := admin.CreateToken(ctx, "smoke "+time.Now().UTC().Format(time.RFC3339))
	if err != nil {
		return rep, fmt.Errorf("create a token: %w", err)
	}
	step("issued token %s", issued.APIKey.ID)
	defer func() {
		// A fresh context: the caller's may be what ended the run.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, rerr := admin.RevokeKey(cctx, issued.APIKey.ID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("revoke the smoke token %s: %w", issued.APIKey.ID, rerr))
			return
		}
		step("revoked token %s", issued.APIKey.ID)
	}()
	c, err := client.New(cfg.URL, issued.Token, cfg.Options...)
	if err != nil {
		return rep, err
	}
	if _, err := c.Whoami(ctx); err != nil {
		return rep, fmt.Errorf("whoami with the issued token: %w", err)
	}

	tpl := cfg.Template
	if tpl == "" {
		list, err := c.Templates(ctx)
		if err != nil {
			return rep, fmt.Errorf("list templates: %w", err)
		}
		if len(list.Templates) == 0 {
			return rep, errors.New("the organization has no template to lease")
		}
		tpl = list.Templates[0].Name
	}
	start := time.Now()
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: tpl, Pool: cfg.Pool, Name: "smoke", Labels: map[string]string{"smoke": "true"}})
	if err != nil {
		return rep, fmt.Errorf("lease %s: %w", tpl, err)
	}
	env := leased.Environment
	rep.Environment = env.ID
	step("leased %s (%s on pool %s)", env.ID, tpl, env.Pool)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, derr := c.DeleteEnvironment(cctx, env.ID); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete %s: %w", env.ID, derr))
			return
		}
		step("deleted %s", env.ID)
	}()

	wctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	for env.State != domain.StateReady {
		if env.State == domain.StateFailed || env.State == domain.StateStopped {
			return rep, fmt.Errorf("%s is %s: %s", env.ID, env.State, env.Error)
		}
		select {
		case <-wctx.Done():
			return rep, fmt.Errorf("%s still %s after %s: is a node of pool %s registered and heartbeating?", env.ID, env.State, cfg.ReadyTimeout, env.Pool)
		case <-time.After(time.Second):
		}
		if env, err = c.GetEnvironment(ctx, env.ID); err != nil {
			return rep, fmt.Errorf("get %s: %w", rep.Environment, err)
		}
	}
	rep.ReadyIn = time.Since(start)
	step("%s ready on node %s after %s", env.ID, env.Node, rep.ReadyIn.Round(time.Millisecond))
	if _, err := c.TouchEnvironment(ctx, env.ID); err != nil {
		return rep, fmt.Errorf("touch %s: %w", env.ID, err)
	}

	data := make([]byte, cfg.ArtifactSize)
	rand.Read(data)
	art, err := c.Push(ctx, bytes.NewReader(data), int64(len(data)), client.ArtifactCreate{Name: "smoke.bin", Project: "smoke"}, client.PushOptions{})
	if err != nil {
		return rep, fmt.Errorf("push an artifact: %w", err)
	}
	rep.Artifact = art.ID
	var back bytes.Buffer
	if _, err := c.Pull(ctx, art.ID, &back, client.PullOptions{}); err != nil {
		return rep, fmt.Errorf("pull %s: %w", art.ID, err)
	}
	if !bytes.Equal(back.Bytes(), data) {
		return rep, fmt.Errorf("pulled %d bytes of %s that differ from the %d pushed", back.Len(), art.ID, len(data))
	}
	step("artifact %s: %d bytes pushed and pulled back intact", art.ID, len(data))

	page, err := c.ListEvents(ctx, client.EventQuery{Subject: "environment/" + env.ID})
	if err != nil {
		return rep, fmt.Errorf("list events: %w", err)
	}
	seen := map[string]bool{}
	for _, e := range page.Events {
		seen[e.Type] = true
	}
	rep.Events = len(page.Events)
	for _, want := range []string{domain.EventEnvLeased, domain.EventEnvReady} {
		if !seen[want] {
			return rep, fmt.Errorf("events of %s lack %s (got %d events)", env.ID, want, len(page.Events))
		}
	}
	step("%d events of %s, including %s and %s", len(page.Events), env.ID, domain.EventEnvLeased, domain.EventEnvReady)
	return rep, nil
}
