package auth

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Limits of the failed-attempt block.
const (
	FailureWindow    = 60 * time.Second
	FailureThreshold = 10
	BlockDuration    = 60 * time.Second
	// LastUsedInterval bounds lastUsed writes to about one a minute per key.
	LastUsedInterval = time.Minute
)

// Store is what authentication needs from persistence.
type Store interface {
	LookupCredential(ctx context.Context, hash, addr string) (*domain.APIKey, domain.AddressState, error)
	RecordAuthFailure(ctx context.Context, addr string, now time.Time, window time.Duration, threshold int, block time.Duration) (domain.AddressState, error)
	MarkKeyUsed(ctx context.Context, hash string, now time.Time, minInterval time.Duration) error
}

// Authenticator turns an Authorization header and a peer address into a Principal.
type Authenticator struct {
	store Store
	clock clock.Clock
	log   *slog.Logger
}

// New returns an authenticator.
func New(store Store, clk clock.Clock, log *slog.Logger) *Authenticator {
	return &Authenticator{store: store, clock: clk, log: log}
}

// Authenticate checks the bearer token presented from addr. addr must be the
// connection's peer, never a client-supplied header.
func (a *Authenticator) Authenticate(ctx context.Context, header, addr string) (domain.Principal, error) {
	now := a.clock.Now()
	token, wellFormed := ParseBearer(header)
	hash := ""
	if wellFormed {
		hash = HashToken(token)
	}
	key, addrState, err := a.store.LookupCredential(ctx, hash, addr)
	if err != nil {
		return domain.Principal{}, err
	}
	expired := key != nil && key.Expires != nil && !now.Before(*key.Expires)
	valid := key != nil && key.Revoked == nil && !expired
	// A node shares its address with whatever runs on it, which could then
	// keep the address blocked and get the node declared lost, failing every
	// environment it runs. A valid node credential is therefore never
	// refused by the block; it already read the key, so sparing it is free.
	if blocked, left := addrState.Blocked(now); blocked && !(valid && key.Credential == domain.CredentialNode) {
		return domain.Principal{}, locked(left)
	}
	if !valid {
		// Each reason says what was sent, so a client can tell a user
		// who sent nothing from one whose token is wrong.
		reason := "malformed bearer token: want 'Authorization: Bearer <token>' with a token of 16 to 256 printable characters"
		switch {
		case strings.TrimSpace(header) == "":
			reason = "missing bearer token"
		case key != nil && key.Revoked != nil:
			reason = "token has been revoked"
		case key != nil:
			reason = domain.MsgTokenExpired
		case wellFormed:
			reason = "unknown token"
		}
		st, err := a.store.RecordAuthFailure(ctx, addr, now, FailureWindow, FailureThreshold, BlockDuration)
		if err != nil {
			return domain.Principal{}, err
		}
		// This attempt is answered as what it is, a failure, even when it is
		// the one that starts the block: only later requests are locked out.
		if blocked, left := st.Blocked(now); blocked {
			a.log.WarnContext(ctx, "address blocked after failed authentications", "addr", addr, "for", left.String())
		}
		return domain.Principal{}, domain.Errorf(domain.CodeUnauthorized, "%s", reason)
	}
	if key.LastUsed == nil || now.Sub(*key.LastUsed) >= LastUsedInterval {
		// Best effort: a failed bookkeeping write must not fail the request.
		if err := a.store.MarkKeyUsed(ctx, hash, now, LastUsedInterval); err != nil {
			a.log.WarnContext(ctx, "lastUsed not recorded", "key", key.ID, "err", err)
		}
	}
	return domain.Principal{
		OrgID: key.OrgID, UserID: key.UserID, Role: key.Role, KeyID: key.ID,
		Credential: key.Credential, Pool: key.Pool, KeyHash: hash, Expires: key.Expires,
		Scopes: key.Scopes, Restrictions: key.Restrictions,
	}, nil
}

// CheckAddress refuses (429 locked) an address under the failed-attempt
// block. With RecordFailure it puts a sign-in with another credential than a
// bearer token (a console sign-in code) under the same block as Authenticate.
func CheckAddress(ctx context.Context, st Store, now time.Time, addr string) error {
	_, state, err := st.LookupCredential(ctx, "", addr)
	if err != nil {
		return err
	}
	if blocked, left := state.Blocked(now); blocked {
		return locked(left)
	}
	return nil
}

// RecordFailure counts a failed sign-in from addr towards its block.
func RecordFailure(ctx context.Context, st Store, now time.Time, addr string) error {
	_, err := st.RecordAuthFailure(ctx, addr, now, FailureWindow, FailureThreshold, BlockDuration)
	return err
}

func locked(left time.Duration) error {
	secs := (left + time.Second - 1) / time.Second * time.Second
	if secs < time.Second {
		secs = time.Second
	}
	return &domain.Error{
		Code:       domain.CodeLocked,
		Message:    "too many failed authentication attempts from this address; retry later",
		RetryAfter: secs,
	}
}
