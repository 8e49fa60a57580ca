package keys

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Console sign-in: envlease console asks for a code with the person's CLI
// token and opens the browser at /#code=<code>; the page exchanges the code
// for a console token of its own. The code is the only thing on the browser
// opener's command line (which every user of the machine can read), so it is
// made worthless quickly: it works once, for ConsoleCodeLifetime.
const (
	// PrefixConsoleCode starts every sign-in code. It is not a token
	// prefix: a code is never accepted as a bearer token.
	PrefixConsoleCode = "elc_"
	// ConsoleCodeLifetime is how long a code can be exchanged: long enough
	// for a browser to start and load the page on a slow machine.
	ConsoleCodeLifetime = 60 * time.Second
	// ConsoleTokenLifetime bounds the console token an exchange mints: a
	// browser tab holds it, so it ends by itself within a working day
	// rather than living until revoked as a CLI token does.
	ConsoleTokenLifetime = 12 * time.Hour
	// ConsoleTokenName names the minted tokens in the keys listing.
	ConsoleTokenName = "console sign-in"
	// consoleCodeLen is the length of a code: the prefix and 43 base62
	// characters (256 bits).
	consoleCodeLen = len(PrefixConsoleCode) + 43
)

// ConsoleHeir is what a sign-in code carries of the token that asks for
// it: nothing, since the console token it buys has every right of the
// person; so only a token with every right, unrestricted, may ask.
var ConsoleHeir = auth.Heir{What: "a console sign-in code", ActsWith: domain.AllScopes}

// ConsoleCode is a new sign-in code, shown once.
type ConsoleCode struct {
	Code    string    `json:"code"`
	Expires time.Time `json:"expires"`
}

// CreateConsoleCode issues a sign-in code for the calling person. Only a
// person's own CLI token may ask, and not a console token (which would let a
// console session renew itself past its end).
func (s *Service) CreateConsoleCode(ctx context.Context, p domain.Principal) (ConsoleCode, error) {
	if p.UserID == "" || p.Credential != domain.CredentialCLI {
		return ConsoleCode{}, domain.Errorf(domain.CodeForbidden, "a console sign-in code is for a person's CLI token; an organization API key signs in to the console by being pasted there")
	}
	if p.Expires != nil {
		return ConsoleCode{}, domain.Errorf(domain.CodeForbidden, "a token that expires (a console sign-in token) cannot ask for sign-in codes")
	}
	// The console token a code buys has every right of the person: a
	// scoped or restricted token asking for one would step out of its
	// limits (auth.Inherit refuses it). What it lets the code carry, an
	// expiry, goes on the code, so the token it buys never outlives its
	// maker even if the refusal above is ever relaxed.
	lim, err := auth.Inherit(p, ConsoleHeir, auth.Limits{})
	if err != nil {
		return ConsoleCode{}, err
	}
	now := s.clock.Now()
	code, _, hash := auth.NewToken(PrefixConsoleCode)
	c := domain.ConsoleCode{
		Hash: hash, OrgID: p.OrgID, UserID: p.UserID, Role: p.Role, KeyHash: p.KeyHash,
		Created: now, Expires: now.Add(ConsoleCodeLifetime), TokenExpires: lim.Expires,
	}
	if err := s.store.PutConsoleCode(ctx, c); err != nil {
		return ConsoleCode{}, err
	}
	return ConsoleCode{Code: code, Expires: c.Expires.UTC()}, nil
}

// ExchangeConsoleCode spends a sign-in code and returns a new console token
// of the person who asked for it, expiring after ConsoleTokenLifetime. It
// works once: every other exchange of the code, a used or expired one, or
// one whose asking token was revoked since, is refused (401). A refusal of
// a well-formed code counts as a failed authentication of addr, the
// caller's peer address, and a blocked address is refused (429) as it is
// for bearer tokens.
func (s *Service) ExchangeConsoleCode(ctx context.Context, code, addr string) (Issued, error) {
	// A string that is not even shaped like a code guesses nothing, and a
	// page can be sent such links in a loop: counting them would let anyone
	// get a visitor's address (a whole office behind one NAT) blocked.
	if len(code) != consoleCodeLen || !strings.HasPrefix(code, PrefixConsoleCode) {
		return Issued{}, domain.Errorf(domain.CodeUnauthorized, "that is not a sign-in code; run envlease console again")
	}
	now := s.clock.Now()
	if err := auth.CheckAddress(ctx, s.store, now, addr); err != nil {
		return Issued{}, err
	}
	out, err := s.exchange(ctx, code)
	if domain.ErrorCode(err) == domain.CodeUnauthorized {
		if ferr := auth.RecordFailure(ctx, s.store, now, addr); ferr != nil {
			return Issued{}, ferr
		}
	}
	return out, err
}

func (s *Service) exchange(ctx context.Context, code string) (Issued, error) {
	c, err := s.store.GetConsoleCode(ctx, auth.HashToken(code))
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return Issued{}, domain.ConsoleCodeSpent()
	}
	if err != nil {
		return Issued{}, err
	}
	now := s.clock.Now()
	if !now.Before(c.Expires) {
		return Issued{}, domain.ConsoleCodeSpent()
	}
	p := domain.Principal{OrgID: c.OrgID, UserID: c.UserID, Role: c.Role, Credential: domain.CredentialCLI}
	expires := now.Add(ConsoleTokenLifetime).UTC()
	// The console token ends no later than the token that asked for the
	// code (auth.Inherit put its expiry on the code); one that has ended
	// buys nothing.
	if c.TokenExpires != nil {
		if !now.Before(*c.TokenExpires) {
			return Issued{}, domain.ConsoleCodeSpent()
		}
		if c.TokenExpires.Before(expires) {
			expires = c.TokenExpires.UTC()
		}
	}
	token, k := NewKey(p, ConsoleTokenName, "console", auth.PrefixCLI, domain.APIKey{
		Credential: domain.CredentialCLI, UserID: c.UserID, Role: c.Role,
		Owner: domain.Owner{Kind: "user", ID: c.UserID}, Expires: &expires,
	}, now)
	// The event of the new token names the person as its actor: the route
	// is unauthenticated, and the code stands for them.
	ctx = domain.WithActor(ctx, domain.ActorOf(p))
	if err := s.store.ExchangeConsoleCode(ctx, c, k, now); err != nil {
		return Issued{}, err
	}
	return Issued{Token: token, APIKey: k}, nil
}

func (s *Service) handleCreateConsoleCode(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	// The body is optional and has no fields today.
	var req struct{}
	if err := httpapi.DecodeOptional(r, &req); err != nil {
		return err
	}
	out, err := s.CreateConsoleCode(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

type exchangeRequest struct {
	Code string `json:"code"`
}

func (s *Service) handleExchangeConsoleCode(w http.ResponseWriter, r *http.Request, _ domain.Principal) error {
	var req exchangeRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.ExchangeConsoleCode(r.Context(), req.Code, httpapi.PeerAddr(r))
	if err != nil {
		return err
	}
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}
