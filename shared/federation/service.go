package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/keys"
)

// Limits of a registration and of an exchanged token's life.
const (
	MaxIssuers           = 20
	MaxConditions        = 10
	DefaultTokenLifetime = 15 * time.Minute
	MaxTokenLifetime     = time.Hour
	maxIDTokenBytes      = 16 << 10
)

// Store is what federation needs from persistence.
type Store interface {
	auth.Store
	PutIssuer(ctx context.Context, is domain.TrustedIssuer) error
	ListIssuers(ctx context.Context, org string) ([]domain.TrustedIssuer, error)
	DeleteIssuer(ctx context.Context, org, id string, now time.Time) error
	PutEvent(ctx context.Context, ev domain.Event) error
	PutKey(ctx context.Context, k domain.APIKey) error
	GetOrg(ctx context.Context, id string) (domain.Org, error)
}

// URLChecker refuses an issuer URL that is not HTTPS on a public address
// (webhooks.Guard, which a local stack lets reach loopback).
type URLChecker interface {
	CheckURL(ctx context.Context, raw string) (string, error)
}

// Service registers trusted issuers and exchanges their identity tokens.
type Service struct {
	store     Store
	clock     clock.Clock
	urls      URLChecker
	verifiers *Verifiers
	log       *slog.Logger
}

// NewService returns the federation service; urls checks issuer URLs at
// registration and verifiers fetches their documents through a guarded
// client.
func NewService(st Store, clk clock.Clock, urls URLChecker, verifiers *Verifiers, log *slog.Logger) *Service {
	return &Service{store: st, clock: clk, urls: urls, verifiers: verifiers, log: log}
}

var claimName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// orgID is the form of an organization id (fixture.ValidateID's).
var orgID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// IssuerHeir is what a trusted issuer carries of the token that registers
// it: the scopes and restrictions its exchanged tokens get, capped by the
// registrant's, and a limited registrant's expiry.
var IssuerHeir = auth.Heir{What: "a trusted issuer", Scopes: true, Restrictions: true}

// Register adds a trusted issuer. Admins only (the route says so).
func (s *Service) Register(ctx context.Context, p domain.Principal, req domain.IssuerRequest) (domain.TrustedIssuer, error) {
	if err := keys.ValidateName(req.Name); err != nil {
		return domain.TrustedIssuer{}, err
	}
	u, err := s.urls.CheckURL(ctx, req.URL)
	if err != nil {
		return domain.TrustedIssuer{}, err
	}
	// The issuer claim is compared as a string: keep the URL as given
	// (CheckURL may re-encode it) unless it changed meaningfully.
	if strings.TrimSuffix(u, "/") == strings.TrimSuffix(req.URL, "/") {
		u = req.URL
	}
	if req.Audience == "" || len(req.Audience) > 200 {
		return domain.TrustedIssuer{}, domain.Invalid("audience", "audience is required, at most 200 characters")
	}
	// An issuer without conditions would trust every job it signs for,
	// any repository of anyone: at least one claim must be pinned.
	if len(req.Conditions) == 0 || len(req.Conditions) > MaxConditions {
		return domain.TrustedIssuer{}, domain.Invalid("conditions", "conditions must pin 1 to %d claims (for example repository)", MaxConditions)
	}
	for c, v := range req.Conditions {
		if !claimName.MatchString(c) || v == "" || len(v) > 200 {
			return domain.TrustedIssuer{}, domain.Invalid("conditions", "condition %q: a claim name of letters, digits and _.:- with a value of 1-200 characters", c)
		}
		if c == "aud" || c == "iss" || c == "exp" || c == "nbf" || c == "iat" {
			return domain.TrustedIssuer{}, domain.Invalid("conditions", "claim %s is checked by the exchange itself", c)
		}
	}
	if req.Scopes == nil {
		return domain.TrustedIssuer{}, domain.Invalid("scopes", "scopes are required: what the exchanged tokens may do")
	}
	// Exchanged tokens act with member rights, so never admin.
	scopes, err := domain.NormalizeScopes(req.Scopes, domain.RoleMember)
	if err != nil {
		return domain.TrustedIssuer{}, err
	}
	restr, err := domain.NormalizeRestrictions(req.Restrictions)
	if err != nil {
		return domain.TrustedIssuer{}, err
	}
	// Its exchanges mint tokens long after this request: they get no
	// scope or restriction beyond the registering token's, and a scoped
	// or restricted registrant's issuer stops trusting when it expires.
	lim, err := auth.Inherit(p, IssuerHeir, auth.Limits{Scopes: scopes, Restrictions: restr})
	if err != nil {
		return domain.TrustedIssuer{}, err
	}
	scopes, restr = lim.Scopes, lim.Restrictions
	life := DefaultTokenLifetime
	if req.TokenLifetime != "" {
		d, err := domain.ParseDuration(req.TokenLifetime)
		if err != nil || d.Std() < time.Minute || d.Std() > MaxTokenLifetime {
			return domain.TrustedIssuer{}, domain.Invalid("tokenLifetime", "tokenLifetime must be a duration from 1m to %s", domain.Duration(MaxTokenLifetime))
		}
		life = d.Std()
	}
	existing, err := s.store.ListIssuers(ctx, p.OrgID)
	if err != nil {
		return domain.TrustedIssuer{}, err
	}
	if len(existing) >= MaxIssuers {
		return domain.TrustedIssuer{}, domain.Errorf(domain.CodeConflict, "an organization trusts at most %d issuers; delete one first", MaxIssuers)
	}
	is := domain.TrustedIssuer{
		ID: auth.NewID("iss_"), Name: req.Name, URL: u, Audience: req.Audience, Conditions: req.Conditions,
		Scopes: scopes, Restrictions: restr, TokenLifetime: domain.Duration(life), Expires: lim.Expires,
		Created: s.clock.Now().UTC(), CreatedBy: p.Actor(), OrgID: p.OrgID,
	}
	if err := s.store.PutIssuer(ctx, is); err != nil {
		return domain.TrustedIssuer{}, err
	}
	return is, nil
}

// List returns the organization's trusted issuers.
func (s *Service) List(ctx context.Context, p domain.Principal) ([]domain.TrustedIssuer, error) {
	return s.store.ListIssuers(ctx, p.OrgID)
}

// Delete removes a trusted issuer.
func (s *Service) Delete(ctx context.Context, p domain.Principal, id string) error {
	return s.store.DeleteIssuer(ctx, p.OrgID, id, s.clock.Now().UTC())
}

// ExchangeRequest is the body of POST /v1/tokens/exchange.
type ExchangeRequest struct {
	Organization string `json:"organization"`
	Token        string `json:"token"`
	// Name names the issued token in listings; default "oidc:<issuer name>".
	Name string `json:"name,omitempty"`
}

// Exchange verifies a CI identity token against the organization's trusted
// issuers and issues a short-lived token with the matching issuer's grant.
// A refusal is 401 naming why, and counts towards addr's block like any
// failed authentication.
func (s *Service) Exchange(ctx context.Context, req ExchangeRequest, addr string) (keys.Issued, error) {
	now := s.clock.Now()
	if err := auth.CheckAddress(ctx, s.store, now, addr); err != nil {
		return keys.Issued{}, err
	}
	o, err := s.exchange(ctx, req, now)
	if err != nil {
		return keys.Issued{}, err
	}
	if o.refusal != nil {
		s.log.InfoContext(ctx, "token exchange refused", "org", req.Organization, "reason", o.refusal.Error())
		if o.issuer != nil {
			// Refusals of a token of an issuer the organization trusts are
			// its business (a misconfigured workflow, or someone trying):
			// an event, besides the address's failure count.
			ev := domain.NewEvent(ctx, domain.EventIssuerRefused, o.issuer.OrgID, domain.Subject{Kind: "issuer", ID: o.issuer.ID}, now,
				map[string]any{"name": o.issuer.Name, "reason": o.refusal.Error(), "addr": addr})
			if err := s.store.PutEvent(ctx, ev); err != nil {
				return keys.Issued{}, err
			}
		}
		if err := auth.RecordFailure(ctx, s.store, now, addr); err != nil {
			return keys.Issued{}, err
		}
		return keys.Issued{}, domain.Errorf(domain.CodeUnauthorized, "%s", o.refusal.Error())
	}
	return o.issued, nil
}

// outcome is an exchange's answer: the issued token, or the refusal to
// answer with and the registration it concerns (nil when no issuer of the
// organization's matches the token).
type outcome struct {
	issued  keys.Issued
	refusal error
	issuer  *domain.TrustedIssuer
}

// exchange returns the outcome, or an error of the service itself (the
// table, an issuer that cannot be reached).
func (s *Service) exchange(ctx context.Context, req ExchangeRequest, now time.Time) (outcome, error) {
	if req.Organization == "" || len(req.Organization) > 63 {
		return outcome{}, domain.Invalid("organization", "organization is required")
	}
	if req.Token == "" || len(req.Token) > maxIDTokenBytes {
		return outcome{}, domain.Invalid("token", "token must be the CI job's OIDC identity token")
	}
	if !orgID.MatchString(req.Organization) {
		// Not an organization id at all: answered as an unknown one.
		return outcome{refusal: errIssuer}, nil
	}
	iss, err := unverifiedIssuer(req.Token)
	if err != nil {
		return outcome{refusal: err}, nil
	}
	all, err := s.store.ListIssuers(ctx, req.Organization)
	if err != nil {
		return outcome{}, err
	}
	var candidates []domain.TrustedIssuer
	for _, is := range all {
		// An expired registration trusts no one: as if it were gone.
		if is.URL == iss && (is.Expires == nil || now.Before(*is.Expires)) {
			candidates = append(candidates, is)
		}
	}
	if len(candidates) == 0 {
		// The same answer for an unknown organization: which ones exist is
		// not told to someone without a token.
		return outcome{refusal: errIssuer}, nil
	}
	first := &candidates[0]
	tok, err := s.verifiers.Verify(ctx, iss, req.Token)
	var fetch errFetch
	if errors.As(err, &fetch) {
		return outcome{}, domain.Unavailable("the identity token's issuer", err)
	}
	if err != nil {
		// Not an event of the organization: the signature may not have
		// been checked (go-oidc checks expiry before it), so anyone could
		// write such refusals into its events. Logged and counted only.
		return outcome{refusal: err}, nil
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return outcome{refusal: errMalformed, issuer: first}, nil
	}
	// Of several registrations of one issuer (one per repository, say),
	// the first whose audience and conditions the token meets grants.
	o := outcome{issuer: first}
	for i, is := range candidates {
		if !slices.Contains(tok.Audience, is.Audience) {
			if o.refusal == nil {
				o.refusal = errAudience
			}
			continue
		}
		if claim := unmet(is.Conditions, claims); claim != "" {
			o.refusal = fmt.Errorf("the identity token's claim %q does not meet the issuer's conditions", claim)
			o.issuer = &candidates[i]
			continue
		}
		issued, err := s.issue(ctx, is, tok, claims, req.Name, now)
		return outcome{issued: issued}, err
	}
	return o, nil
}

// unmet returns the first claim (in name order) that does not meet its
// condition, or "".
func unmet(conditions map[string]string, claims map[string]any) string {
	names := make([]string, 0, len(conditions))
	for c := range conditions {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		v, ok := claimString(claims[c])
		if !ok || !domain.MatchCondition(conditions[c], v) {
			return c
		}
	}
	return ""
}

// claimString is a claim's value as a condition sees it: strings as they
// are, booleans and numbers in their JSON form; anything else never matches.
func claimString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return fmt.Sprint(x), true
	case float64:
		return fmt.Sprint(x), true
	}
	return "", false
}

func (s *Service) issue(ctx context.Context, is domain.TrustedIssuer, tok *oidc.IDToken, claims map[string]any, name string, now time.Time) (keys.Issued, error) {
	if name == "" {
		name = "oidc:" + is.Name
	}
	if err := keys.ValidateName(name); err != nil {
		return keys.Issued{}, err
	}
	life := is.TokenLifetime.Std()
	if o, err := s.store.GetOrg(ctx, is.OrgID); err == nil && o.MaxTokenLifetime > 0 && o.MaxTokenLifetime.Std() < life {
		life = o.MaxTokenLifetime.Std()
	} else if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return keys.Issued{}, err
	}
	expires := now.Add(life).UTC()
	if is.Expires != nil && is.Expires.Before(expires) {
		// No exchanged token outlives the registration that grants it.
		expires = is.Expires.UTC()
	}
	seen := map[string]string{}
	for c := range is.Conditions {
		if v, ok := claimString(claims[c]); ok {
			seen[c] = v
		}
	}
	p := domain.Principal{OrgID: is.OrgID, KeyID: is.ID}
	token, k := keys.NewKey(p, name, "oidc", auth.PrefixOrg, domain.APIKey{
		Credential: domain.CredentialOrg, Role: domain.RoleMember,
		Owner:  domain.Owner{Kind: "organization", ID: is.OrgID},
		Scopes: is.Scopes, Restrictions: is.Restrictions, Expires: &expires,
		Exchange: &domain.Exchange{Issuer: is.ID, Subject: tok.Subject, Claims: seen},
	}, now)
	k.CreatedBy = "issuer:" + is.ID
	// PutKey records the key.created event, with the exchange in it:
	// every exchange is an event.
	if err := s.store.PutKey(ctx, k); err != nil {
		return keys.Issued{}, err
	}
	return keys.Issued{Token: token, APIKey: k}, nil
}
