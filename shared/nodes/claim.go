package nodes

import (
	"context"
	"fmt"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Snapshot is what a node needs to fetch a sealed artifact (a snapshot, a
// share's archive): a signed link, and the size and SHA-256 to check.
type Snapshot struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	URL         string    `json:"url"`
	Expires     time.Time `json:"expires"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"contentType"`
	Created     time.Time `json:"created"`
}

// Claimed is what a node gets with an environment it claimed.
type Claimed struct {
	Environment domain.Environment `json:"environment"`
	Template    domain.Template    `json:"template"`
	// Snapshot is set when the lease named one: download, unpack into the
	// environment's root, and report `restored` with ready.
	Snapshot *Snapshot `json:"snapshot"`
	// Shares are the environment's shares that carry files, in its order:
	// download each archive (tar, zstd-compressed) and unpack it at the
	// share's envPath before the command starts. Never null.
	Shares []ClaimedShare `json:"shares"`
	// Image is set when the template's image is an artifact (an OCI image
	// archive): download it, check its size and SHA-256, and run the
	// environment from it. A template's image.ref the node pulls itself.
	Image *Snapshot `json:"image"`
}

// ClaimedShare is a share whose files the lease sent as an artifact.
type ClaimedShare struct {
	Name    string   `json:"name"`
	EnvPath string   `json:"envPath"`
	Archive Snapshot `json:"archive"`
}

// prepare gathers what the node needs for a claimed environment. What can no
// longer be run (its template deleted, its snapshot or a share's archive
// expired since the lease) is failed here with a clear error, and nil says:
// claim the next one.
func (s *Service) prepare(ctx context.Context, e domain.Environment, tmpl templateFunc) (*Claimed, error) {
	t, err := tmpl(ctx, e.OrgID, e.Template)
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return nil, s.fail(ctx, e, fmt.Sprintf("template %q no longer exists", e.Template), StopFailed)
	}
	if err != nil {
		return nil, err
	}
	if t, err = s.publicExports(ctx, e.OrgID, t); err != nil {
		return nil, err
	}
	c := &Claimed{Environment: e, Template: t.Normalized(), Shares: []ClaimedShare{}}
	if t.Image != nil && t.Image.Artifact != "" {
		dl, failure, err := s.download(ctx, e.OrgID, t.Image.Artifact, fmt.Sprintf("image.artifact %q of template %q", t.Image.Artifact, t.Name))
		if err != nil || failure != "" {
			return nil, s.failWith(ctx, e, failure, err)
		}
		c.Image = dl
	}
	if e.Snapshot != "" {
		dl, failure, err := s.download(ctx, e.OrgID, e.Snapshot, fmt.Sprintf("snapshot %q", e.Snapshot))
		if err != nil || failure != "" {
			return nil, s.failWith(ctx, e, failure, err)
		}
		c.Snapshot = dl
	}
	for _, sh := range e.Shares {
		if sh.Artifact == "" {
			continue
		}
		dl, failure, err := s.download(ctx, e.OrgID, sh.Artifact, fmt.Sprintf("artifact %q of share %q", sh.Artifact, sh.Name))
		if err != nil || failure != "" {
			return nil, s.failWith(ctx, e, failure, err)
		}
		c.Shares = append(c.Shares, ClaimedShare{Name: sh.Name, EnvPath: sh.EnvPath, Archive: *dl})
	}
	return c, nil
}

// templateFunc reads an organization's template for a claim.
type templateFunc func(ctx context.Context, org, name string) (domain.Template, error)

// readTemplate is the templateFunc of a single claim: one read.
func (s *Service) readTemplate(ctx context.Context, org, name string) (domain.Template, error) {
	return s.store.GetTemplate(ctx, org, name)
}

// download signs a link to the artifact id for a node. An artifact that can
// no longer be downloaded (expired, gone, never sealed) is not an error of
// the claim but of the environment: failure says why, in words naming what.
func (s *Service) download(ctx context.Context, org, id, what string) (dl *Snapshot, failure string, err error) {
	a, err := s.store.GetArtifact(ctx, org, id)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return nil, "", err
	}
	if err != nil || !a.UsableAt(s.clock.Now()) || s.links == nil {
		return nil, what + " is no longer a sealed, unexpired artifact", nil
	}
	link, err := s.links.LinkFor(ctx, a, SnapshotLinkTTL)
	if code := domain.ErrorCode(err); code == domain.CodeGone || code == domain.CodeConflict {
		return nil, fmt.Sprintf("%s cannot be downloaded: %s", what, domain.AsError(err).Message), nil
	}
	if err != nil {
		return nil, "", err
	}
	return &Snapshot{
		ID: a.ID, Name: a.Name, URL: link.URL, Expires: link.Expires, Size: a.Size, SHA256: a.SHA256,
		ContentType: a.ContentType, Created: a.Created,
	}, "", nil
}

// failWith fails the environment with failure, or passes err on.
func (s *Service) failWith(ctx context.Context, e domain.Environment, failure string, err error) error {
	if err != nil {
		return err
	}
	return s.fail(ctx, e, failure, StopFailed)
}
