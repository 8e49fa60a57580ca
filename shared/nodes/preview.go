package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/domain"
)

// RevokePreviews tells e's node over its connection that preview links of
// e are revoked, so it refuses them at once rather than at its next
// heartbeat. It never fails the revocation (already stored): a lost message
// leaves it to the heartbeat answers, which name every revoked preview, and
// to a new connection's first beat.
func (s *Stopper) RevokePreviews(ctx context.Context, e domain.Environment, ids []string) {
	if e.Node == "" || len(ids) == 0 {
		return
	}
	conn, err := s.store.NodeConnection(ctx, e.OrgID, e.Node, s.clock.Now())
	if err != nil || conn == "" {
		return
	}
	msg, err := json.Marshal(Message{Type: MsgPreviews, Node: e.Node, Environment: e.ID, Previews: ids})
	if err != nil {
		return
	}
	err = s.poster.Post(ctx, ConnectionID(conn), msg)
	if errors.Is(err, ErrGone) {
		_ = s.store.DeleteNodeConnection(ctx, e.OrgID, e.Node, conn)
	} else if err != nil {
		s.log.WarnContext(ctx, "preview revocation not sent", "environment", e.ID, "node", e.Node, "err", err.Error())
	}
}

// PreviewOpened is a node's word that a preview link was opened (its token
// traded for a cookie): by which browser, from where.
type PreviewOpened struct {
	Environment string    `json:"environment"`
	Preview     string    `json:"preview"`
	Remote      string    `json:"remote"`
	UserAgent   string    `json:"userAgent"`
	At          time.Time `json:"at"`
}

// MaxOpenedPerBeat bounds the openings one heartbeat carries; a node keeps
// the rest for the next.
const MaxOpenedPerBeat = 50

// previewActivity acts on what a heartbeat says of activity and previews:
// it touches the active environments (touchActive) and records each opening as an environment.preview
// event (action "opened") of an environment the node runs.
func (s *Service) previewActivity(ctx context.Context, n domain.Node, active []string, opened []PreviewOpened) error {
	if err := s.touchActive(ctx, n, active); err != nil {
		return err
	}
	if len(opened) == 0 {
		return nil
	}
	if len(opened) > MaxOpenedPerBeat {
		return domain.Invalid("opened", "at most %d openings per heartbeat", MaxOpenedPerBeat)
	}
	ids := make([]string, 0, len(opened))
	for _, o := range opened {
		if validEnvID(o.Environment) && !slices.Contains(ids, o.Environment) {
			ids = append(ids, o.Environment)
		}
	}
	envs, err := s.store.GetEnvironments(ctx, n.OrgID, ids)
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, e := range envs {
		mine[e.ID] = e.Node == n.ID
	}
	for _, o := range opened {
		if !mine[o.Environment] {
			continue // not this node's to speak of
		}
		at := o.At
		if at.IsZero() || at.After(s.clock.Now()) {
			at = s.clock.Now()
		}
		ev := domain.NewEvent(ctx, domain.EventEnvPreview, n.OrgID, domain.Subject{Kind: "environment", ID: o.Environment}, at,
			map[string]any{"action": "opened", "preview": clip(o.Preview, 64), "from": clip(o.Remote, 64), "userAgent": clip(o.UserAgent, 256), "node": n.ID})
		if err := s.store.PutEvent(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// touchActive moves the idle deadline of each ready environment of n that
// was active on its node (what its template counts: tunnel and preview
// bytes, exec sessions, CPU, network; docs/environments.md, "When an
// environment is idle"), as POST /v1/environments/{id}/touch would: to now
// + its idle timeout, never past its hard end. A node reports an
// environment at most every domain.ActiveEvery of its idle timeout (a
// quarter), so this costs one batch read of the named environments and a
// write per environment that often. Whether an environment is idle is
// still decided in one place, the timeout job, from idleUntil.
func (s *Service) touchActive(ctx context.Context, n domain.Node, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if len(ids) > MaxHeartbeatIDs {
		return domain.Invalid("active", "at most %d environment ids per heartbeat", MaxHeartbeatIDs)
	}
	valid := make([]string, 0, len(ids))
	for _, x := range ids {
		if validEnvID(x) {
			valid = append(valid, x)
		}
	}
	envs, err := s.store.GetEnvironments(ctx, n.OrgID, valid)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	for _, e := range envs {
		if e.Node != n.ID || e.State != domain.StateReady {
			continue
		}
		next := now.Add(time.Duration(e.Idle))
		if next.After(e.Expires) {
			next = e.Expires
		}
		if !next.After(e.IdleUntil) {
			continue
		}
		// Not moved means a stop or a later touch won: either is fine.
		if _, _, err := s.store.TouchEnvironment(ctx, e, next); err != nil {
			return err
		}
	}
	return nil
}

// publicExports is t as a node may run it: with no public export when the
// organization forbids them, whatever the template said when it was
// applied. Only a template with a public export costs the organization's
// read.
func (s *Service) publicExports(ctx context.Context, org string, t domain.Template) (domain.Template, error) {
	public := false
	for _, x := range t.Exports {
		public = public || x.Public
	}
	if !public {
		return t, nil
	}
	o, err := s.store.GetOrg(ctx, org)
	if err != nil {
		return t, err
	}
	if !o.ForbidPublicExports {
		return t, nil
	}
	exports := make(map[string]domain.Export, len(t.Exports))
	for name, x := range t.Exports {
		x.Public = false
		exports[name] = x
	}
	t.Exports = exports
	return t, nil
}
