package nodes

import (
	"context"
	"errors"
	"log/slog"

	"github.com/envlease/envlease/shared/domain"
)

// RevocationStore is what ending a revoked credential's connections needs
// from the table.
type RevocationStore interface {
	KeyConnections(ctx context.Context, org, pool, keyID string) ([]domain.NodeConnection, error)
	DeleteConnection(ctx context.Context, org, pool, id string) error
}

// Revocations ends what a revoked node credential holds; the keys service
// calls it after a revocation (keys.WithConnectionCloser).
//
// Every message on a connection is checked against the key record anyway
// (Socket.Answer), so a revoked node can do nothing on a connection it still
// holds; closing it is what makes it let go within seconds, and forgetting
// its record is what keeps offers from reaching it. Ending its nodes is what
// stops users' tunnels to it: an ended node signs no ticket, and what it ran
// is failed at once rather than at the lost-node sweep.
type Revocations struct {
	store  RevocationStore
	closer Closer
	nodes  *Service
	log    *slog.Logger
}

// NewRevocations returns the ender of revoked credentials' connections and
// nodes. closer nil closes no connection (there are none to close where
// nodes speak only HTTP; the records are still forgotten); svc ends the
// credential's nodes (nil: they are left to the lost-node sweep).
func NewRevocations(st RevocationStore, closer Closer, svc *Service, log *slog.Logger) *Revocations {
	return &Revocations{store: st, closer: closer, nodes: svc, log: log}
}

// CloseConnections ends everything node credential k holds: its nodes
// (EndKeyNodes) and every connection it opened. Each connection's record
// is deleted first (no wake reads it again, so no offer goes to it), then
// the connection is closed. A close that fails is logged, not returned: the
// key is revoked, the connection can do nothing, and its next checked
// message closes it (Socket.Answer). A failing read or write of the table
// is returned, after the rest was tried, and revoking again (harmless)
// retries it.
//
// The records are read strongly consistent after the revocation committed,
// and a connection (or a node) is recorded only in a transaction that
// checks the key unrevoked (store.PutConnection, store.PutNode), so none
// recorded before the revocation is missed and none is recorded after it.
func (r *Revocations) CloseConnections(ctx context.Context, k domain.APIKey) error {
	if k.Credential != domain.CredentialNode || k.Pool == "" {
		return nil
	}
	var errs []error
	if r.nodes != nil {
		if n, failed, err := r.nodes.EndKeyNodes(ctx, k); err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			r.log.InfoContext(ctx, "nodes of a revoked credential ended", "key", k.ID, "nodes", n, "environments", failed)
		}
	}
	return errors.Join(append(errs, r.closeConnections(ctx, k))...)
}

func (r *Revocations) closeConnections(ctx context.Context, k domain.APIKey) error {
	conns, err := r.store.KeyConnections(ctx, k.OrgID, k.Pool, k.ID)
	if err != nil {
		return err
	}
	for _, c := range conns {
		if err := r.store.DeleteConnection(ctx, c.OrgID, c.Pool, c.ID); err != nil {
			return err
		}
		if r.closer == nil {
			continue
		}
		if err := r.closer.CloseConnection(ctx, ConnectionID(c.ID), ReasonRevoked); err != nil {
			r.log.WarnContext(ctx, "connection of a revoked credential not closed; its next message closes it",
				"key", k.ID, "connection", c.ID, "node", c.Node, "err", err.Error())
			continue
		}
		r.log.InfoContext(ctx, "connection of a revoked credential closed", "key", k.ID, "connection", c.ID, "node", c.Node)
	}
	return nil
}

// EndKeyNodes ends every active node node credential k registered, as the
// lost-node sweep ends a lost node: each is marked lost, and every
// environment it ran fails with ErrorNodeRevoked (stopReason node_revoked), its
// quota released once. It returns how many nodes it ended and how many
// environments it failed. Ending them again finds none: harmless.
//
// A node's end is conditioned on its version; only a heartbeat that was
// checked before the revocation committed can move it in between, so a
// few tries end it.
func (s *Service) EndKeyNodes(ctx context.Context, k domain.APIKey) (int, int, error) {
	ns, err := s.store.KeyNodes(ctx, k.OrgID, k.ID)
	if err != nil {
		return 0, 0, err
	}
	ended, failed := 0, 0
	for _, n := range ns {
		for try := 0; ; try++ {
			f, err := s.endNode(ctx, n, domain.NodeLost, ErrorNodeRevoked, StopRevoked)
			failed += f
			if err != nil {
				return ended, failed, err
			}
			if n, err = s.store.GetNode(ctx, n.OrgID, n.ID); err != nil {
				return ended, failed, err
			}
			if n.State != domain.NodeActive {
				ended++
				break
			}
			if try == attempts-1 {
				return ended, failed, domain.Errorf(domain.CodeConflict, "node %s is changing too fast; revoke again", n.ID)
			}
		}
	}
	return ended, failed, nil
}
