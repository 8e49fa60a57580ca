package nodes

import (
	"context"
	"log/slog"

	"github.com/envlease/envlease/shared/domain"
)

// RevocationStore is what ending a revoked credential's connections needs
// from the table.
type RevocationStore interface {
	KeyConnections(ctx context.Context, org, pool, keyID string) ([]domain.NodeConnection, error)
	DeleteConnection(ctx context.Context, org, pool, id string) error
}

// Revocations ends the node protocol connections of revoked node
// credentials; the keys service calls it after a revocation
// (keys.WithConnectionCloser).
//
// Every message on a connection is checked against the key record anyway
// (Socket.Answer), so a revoked node can do nothing on a connection it still
// holds; closing it is what makes it let go within seconds, and forgetting
// its record is what keeps offers from reaching it.
type Revocations struct {
	store  RevocationStore
	closer Closer
	log    *slog.Logger
}

// NewRevocations returns the closer of revoked credentials' connections.
func NewRevocations(st RevocationStore, closer Closer, log *slog.Logger) *Revocations {
	return &Revocations{store: st, closer: closer, log: log}
}

// CloseConnections ends every connection node credential k opened: each
// record is deleted first (no wake reads it again, so no offer goes to
// it), then the connection is closed. A close that fails is logged, not
// returned: the key is revoked, the connection can do nothing, and its next
// checked message closes it (Socket.Answer). A failing read or delete of
// the table is returned, and revoking again (harmless) retries it.
//
// The records are read strongly consistent after the revocation committed,
// and a connection is recorded only in a transaction that checks the key
// unrevoked (store.PutConnection), so no connection recorded before the
// revocation is missed and none is recorded after it.
func (r *Revocations) CloseConnections(ctx context.Context, k domain.APIKey) error {
	if k.Credential != domain.CredentialNode || k.Pool == "" {
		return nil
	}
	conns, err := r.store.KeyConnections(ctx, k.OrgID, k.Pool, k.ID)
	if err != nil {
		return err
	}
	for _, c := range conns {
		if err := r.store.DeleteConnection(ctx, c.OrgID, c.Pool, c.ID); err != nil {
			return err
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
