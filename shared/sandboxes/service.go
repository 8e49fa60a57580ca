// Package sandboxes registers client machines (POST /v1/sandboxes), lists
// them, and redeems their single-use network-join keys.
package sandboxes

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// PrefixJoinKey marks network-join keys, so a leaked one is recognisable.
const PrefixJoinKey = "els_join_"

// Store is what the sandboxes service needs from persistence.
type Store interface {
	PutSandbox(ctx context.Context, sb domain.Sandbox) error
	GetSandbox(ctx context.Context, org, id string) (domain.Sandbox, error)
	ListSandboxes(ctx context.Context, org string) ([]domain.Sandbox, error)
	RedeemJoinKey(ctx context.Context, org, hash string, now time.Time) (domain.Sandbox, error)
}

// Service holds the sandbox rules.
type Service struct {
	store Store
	clock clock.Clock
}

// NewService returns the sandboxes service.
func NewService(st Store, clk clock.Clock) *Service { return &Service{store: st, clock: clk} }

// Routes is the sandboxes group.
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPost, Path: "/v1/sandboxes", Access: httpapi.Member, Handler: s.handleCreate},
		{Method: http.MethodGet, Path: "/v1/sandboxes", Access: httpapi.Member, Handler: s.handleList},
		{Method: http.MethodGet, Path: "/v1/sandboxes/{id}", Access: httpapi.Member, Handler: s.handleGet},
		{Method: http.MethodPost, Path: "/v1/sandboxes/join", Access: httpapi.Member, Handler: s.handleJoin},
	}
}

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Name      string `json:"name"`
	Hostname  string `json:"hostname"`
	PublicKey string `json:"publicKey"`
}

// Registered is a new sandbox with its join key, shown only this once.
type Registered struct {
	Sandbox domain.Sandbox `json:"sandbox"`
	JoinKey string         `json:"joinKey"`
}

// Create registers the caller's machine and issues its join key. Only the
// key's SHA-256 is stored.
func (s *Service) Create(ctx context.Context, p domain.Principal, req CreateRequest) (Registered, error) {
	if strings.TrimSpace(req.Name) == "" {
		return Registered{}, domain.Invalid("name", "name is required")
	}
	if err := domain.ValidateText("name", req.Name, 100); err != nil {
		return Registered{}, err
	}
	if err := domain.ValidateText("hostname", req.Hostname, 253); err != nil {
		return Registered{}, err
	}
	if err := domain.ValidateText("publicKey", req.PublicKey, 4096); err != nil {
		return Registered{}, err
	}
	now := s.clock.Now()
	token, prefix, hash := auth.NewToken(PrefixJoinKey)
	sb := domain.Sandbox{
		OrgID: p.OrgID, ID: domain.SortableID("sbx_", now), Name: req.Name, Hostname: req.Hostname,
		PublicKey: req.PublicKey, CreatedBy: p.Actor(), Created: now, JoinKeyPrefix: prefix, JoinKeyHash: hash,
	}
	if err := s.store.PutSandbox(ctx, sb); err != nil {
		return Registered{}, err
	}
	return Registered{Sandbox: sb, JoinKey: token}, nil
}

// Join redeems a join key of the caller's organization, once. An unknown key
// (or another organization's) is 404; a redeemed one is 410.
func (s *Service) Join(ctx context.Context, p domain.Principal, joinKey string) (domain.Sandbox, error) {
	if !strings.HasPrefix(joinKey, PrefixJoinKey) {
		return domain.Sandbox{}, domain.Invalid("joinKey", "joinKey must be a key returned by POST /v1/sandboxes (it starts with %s)", PrefixJoinKey)
	}
	return s.store.RedeemJoinKey(ctx, p.OrgID, auth.HashToken(joinKey), s.clock.Now())
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req CreateRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	out, err := s.Create(r.Context(), p, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sandboxes/"+out.Sandbox.ID)
	httpapi.WriteSecret(w, http.StatusCreated, out)
	return nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	sbs, err := s.store.ListSandboxes(r.Context(), p.OrgID)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"sandboxes": sbs})
	return nil
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	sb, err := s.store.GetSandbox(r.Context(), p.OrgID, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"sandbox": sb})
	return nil
}

type joinRequest struct {
	JoinKey string `json:"joinKey"`
}

func (s *Service) handleJoin(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req joinRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	sb, err := s.Join(r.Context(), p, req.JoinKey)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"sandbox": sb})
	return nil
}
