package secrets

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Store is what secrets need from persistence.
type Store interface {
	PutSecret(ctx context.Context, s domain.SealedSecret) error
	ListSecrets(ctx context.Context, org string) ([]domain.SealedSecret, error)
	GetSecret(ctx context.Context, org, name string) (domain.SealedSecret, error)
	GetSecrets(ctx context.Context, org string, names []string) (map[string]domain.SealedSecret, error)
	DeleteSecret(ctx context.Context, org, name string, now time.Time) error
	ListTemplates(ctx context.Context, org string) ([]domain.Template, error)
}

var errNoKeys = errors.New("secrets: no key service configured")

// Service sets, lists, deletes and opens organization secrets.
type Service struct {
	store Store
	keys  DataKeys
	clock clock.Clock
	log   *slog.Logger
}

// NewService returns the secrets service; keys seals and opens data keys
// (nil: a function that only lists and deletes, and refuses to set).
func NewService(st Store, keys DataKeys, clk clock.Clock, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: st, keys: keys, clock: clk, log: log}
}

// Routes are the secrets group: setting and deleting are an admin's
// (secrets:write), reading names every member's (secrets:read).
func Routes(s *Service) []httpapi.Route {
	return []httpapi.Route{
		{Method: http.MethodPut, Path: "/v1/secrets/{name}", Access: httpapi.Admin, Handler: s.handlePut},
		{Method: http.MethodGet, Path: "/v1/secrets", Access: httpapi.Member, Handler: s.handleList},
		{Method: http.MethodGet, Path: "/v1/secrets/{name}", Access: httpapi.Member, Handler: s.handleGet},
		{Method: http.MethodDelete, Path: "/v1/secrets/{name}", Access: httpapi.Admin, Handler: s.handleDelete},
	}
}

// SetRequest is the body of PUT /v1/secrets/{name}.
type SetRequest struct {
	Value string `json:"value"`
}

// Set seals value and stores it as org's secret name, replacing any value
// it had; the answer shows the record, never the value.
func (s *Service) Set(ctx context.Context, p domain.Principal, name string, value []byte) (domain.Secret, error) {
	if err := domain.ValidateSecretName(name); err != nil {
		return domain.Secret{}, err
	}
	if err := domain.ValidateSecretValue(value); err != nil {
		return domain.Secret{}, err
	}
	if s.keys == nil {
		return domain.Secret{}, domain.Internal(errNoKeys)
	}
	existing, err := s.store.ListSecrets(ctx, p.OrgID)
	if err != nil {
		return domain.Secret{}, err
	}
	if len(existing) >= domain.MaxSecrets && !slices.ContainsFunc(existing, func(x domain.SealedSecret) bool { return x.Name == name }) {
		return domain.Secret{}, domain.Errorf(domain.CodeConflict, "an organization holds at most %d secrets; delete one first", domain.MaxSecrets)
	}
	templates, err := s.store.ListTemplates(ctx, p.OrgID)
	if err != nil {
		return domain.Secret{}, err
	}
	sealed, err := Seal(ctx, s.keys, p.OrgID, name, value)
	if err != nil {
		return domain.Secret{}, domain.Unavailable("the key service", err)
	}
	sec := domain.SealedSecret{OrgID: p.OrgID, Name: name, SetBy: p.Actor(), Set: s.clock.Now().UTC(), Size: len(value),
		KeyID: sealed.KeyID, DataKey: sealed.DataKey, Nonce: sealed.Nonce, Ciphertext: sealed.Ciphertext}
	if err := s.store.PutSecret(ctx, sec); err != nil {
		return domain.Secret{}, err
	}
	s.log.InfoContext(ctx, "secret set", "org", p.OrgID, "secret", name, "size", len(value), "by", p.Actor())
	return record(sec, templates), nil
}

// List returns the organization's secrets with the templates that bind
// each.
func (s *Service) List(ctx context.Context, p domain.Principal) ([]domain.Secret, error) {
	sealed, err := s.store.ListSecrets(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	templates, err := s.store.ListTemplates(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	out := make([]domain.Secret, len(sealed))
	for i, x := range sealed {
		out[i] = record(x, templates)
	}
	return out, nil
}

// Get returns one secret's record.
func (s *Service) Get(ctx context.Context, p domain.Principal, name string) (domain.Secret, error) {
	x, err := s.store.GetSecret(ctx, p.OrgID, name)
	if err != nil {
		return domain.Secret{}, err
	}
	templates, err := s.store.ListTemplates(ctx, p.OrgID)
	if err != nil {
		return domain.Secret{}, err
	}
	return record(x, templates), nil
}

// Delete removes a secret. Templates that bind it then refuse leases (422
// naming it) until it is set again.
func (s *Service) Delete(ctx context.Context, p domain.Principal, name string) error {
	if err := s.store.DeleteSecret(ctx, p.OrgID, name, s.clock.Now().UTC()); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "secret deleted", "org", p.OrgID, "secret", name, "by", p.Actor())
	return nil
}

// Open returns the values of the secrets t binds, for the node that runs
// an environment of t in org (nodes checks that). A secret deleted since
// the lease is an error naming it.
func (s *Service) Open(ctx context.Context, org string, t domain.Template) (map[string]string, error) {
	names := t.SecretNames()
	out := map[string]string{}
	if len(names) == 0 {
		return out, nil
	}
	if s.keys == nil {
		return nil, domain.Internal(errNoKeys)
	}
	sealed, err := s.store.GetSecrets(ctx, org, names)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		x, ok := sealed[n]
		if !ok {
			return nil, domain.Invalid("secrets", "template %s binds secret %s, which is not set", t.Name, n)
		}
		v, err := Open(ctx, s.keys, org, n, Sealed{KeyID: x.KeyID, DataKey: x.DataKey, Nonce: x.Nonce, Ciphertext: x.Ciphertext})
		if err != nil {
			return nil, domain.Unavailable("the key service", err)
		}
		out[n] = string(v)
	}
	return out, nil
}

// CheckBound refuses a lease of t while a secret it binds is not set: 422
// naming the secret. One read, and none for a template that binds none.
func CheckBound(ctx context.Context, st interface {
	GetSecrets(ctx context.Context, org string, names []string) (map[string]domain.SealedSecret, error)
}, org string, t domain.Template) error {
	names := t.SecretNames()
	if len(names) == 0 {
		return nil
	}
	found, err := st.GetSecrets(ctx, org, names)
	if err != nil {
		return err
	}
	var missing []string
	for _, n := range names {
		if _, ok := found[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return domain.Invalid("template", "template %s binds secret %s, which is not set (envlease secrets set %s)", t.Name, strings.Join(missing, ", "), missing[0])
	}
	return nil
}

// record is a secret's record as the API shows it.
func record(x domain.SealedSecret, templates []domain.Template) domain.Secret {
	out := domain.Secret{Name: x.Name, SetBy: x.SetBy, Set: x.Set, Size: x.Size, Templates: []string{}, OrgID: x.OrgID}
	for _, t := range templates {
		if slices.Contains(t.SecretNames(), x.Name) {
			out.Templates = append(out.Templates, t.Name)
		}
	}
	slices.Sort(out.Templates)
	return out
}

func (s *Service) handlePut(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	var req SetRequest
	if err := httpapi.Decode(r, &req); err != nil {
		return err
	}
	sec, err := s.Set(r.Context(), p, r.PathValue("name"), []byte(req.Value))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"secret": sec})
	return nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	out, err := s.List(r.Context(), p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"secrets": out})
	return nil
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	out, err := s.Get(r.Context(), p, r.PathValue("name"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"secret": out})
	return nil
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request, p domain.Principal) error {
	if err := s.Delete(r.Context(), p, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
