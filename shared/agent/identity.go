package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/identity"
	"golang.org/x/sys/unix"
)

// An environment whose lease carries an identity finds its tokens in files
// (docs/identity.md): the agent fetches them with its node credential (the
// node never holds the signing key), writes each at its path inside the
// environment before the command starts, and replaces them at 80% of their
// lifetime until the environment ends.

// Variables that name an identity's token files.
const (
	// EnvIdentityTokenFile names the first audience's token.
	EnvIdentityTokenFile = "ENVLEASE_IDENTITY_TOKEN_FILE"
	// EnvIdentityDir names the folder of every audience's token.
	EnvIdentityDir = "ENVLEASE_IDENTITY_DIR"
	// EnvAWSTokenFile is what the AWS SDKs read a web identity token
	// from: the first sts.amazonaws.com audience's.
	EnvAWSTokenFile = "AWS_WEB_IDENTITY_TOKEN_FILE"
)

// identityPaths are the variables an environment with identity id gets.
func identityPaths(id *domain.TemplateIdentity) map[string]string {
	if id == nil || len(id.Audiences) == 0 {
		return nil
	}
	out := map[string]string{
		EnvIdentityDir:       domain.IdentityPath,
		EnvIdentityTokenFile: identity.TokenPath(id.Audiences[0]),
	}
	for _, aud := range id.Audiences {
		if aud == domain.AWSAudience {
			out[EnvAWSTokenFile] = identity.TokenPath(aud)
			break
		}
	}
	return out
}

// IdentityTokens fetches the tokens of an environment the node runs.
func (c *Client) IdentityTokens(ctx context.Context, node, env string) (identity.NodeTokens, error) {
	var out identity.NodeTokens
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/environments/"+url.PathEscape(env)+"/identity", nil, &out)
	return out, err
}

// writeIdentity fetches the environment's tokens and writes them into its
// files; it answers when to fetch them again.
func (a *Agent) writeIdentity(ctx context.Context, node, id string, files runtimes.Files) (time.Time, error) {
	toks, err := a.api.IdentityTokens(ctx, node, id)
	if err != nil {
		return time.Time{}, fmt.Errorf("fetch the identity's tokens: %w", err)
	}
	for _, t := range toks.Tokens {
		if err := writeToken(files, t); err != nil {
			return time.Time{}, fmt.Errorf("write the identity token for %s: %w", t.Audience, err)
		}
	}
	return toks.Refresh, nil
}

// writeToken replaces the token file at t.Path under the environment's
// root by a rename, so a reader sees the old token or the new one, never
// half of one. The file is the environment's user's, 0400. Its folders are
// made through os.Root (a link the environment made cannot lead the agent
// out of its files); then they are opened one at a time without following
// links, and the ownership changes, the file and the rename are made on
// those descriptors, so a folder the environment replaced by a link (even
// to another of its own folders) fails the write instead of redirecting a
// chown.
func writeToken(files runtimes.Files, t identity.Token) error {
	rel := strings.TrimPrefix(path.Clean(t.Path), "/")
	if !strings.HasPrefix(t.Path, domain.IdentityPath+"/") || strings.Contains(rel, "..") {
		return fmt.Errorf("token path %q is not under %s", t.Path, domain.IdentityPath)
	}
	root, err := os.OpenRoot(files.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	dir := path.Dir(rel)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d, err := openNoFollow(files.Root, dir, func(p string, f *os.File) error {
		// Each folder on the way from the identity folder down.
		if o := files.Owner; o != nil && strings.HasPrefix(p, "run/envlease") {
			return f.Chown(o.UID, o.GID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer d.Close()
	dfd := int(d.Fd())
	const tmp = ".token.new"
	_ = unix.Unlinkat(dfd, tmp, 0)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return &os.PathError{Op: "open", Path: path.Join(dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir, tmp))
	_, werr := f.WriteString(t.Token)
	if werr == nil && files.Owner != nil {
		werr = f.Chown(files.Owner.UID, files.Owner.GID)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, path.Base(rel))
	}
	if werr != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return werr
	}
	return nil
}

// openNoFollow opens folder rel under base one name at a time, refusing a
// link at any step, and calls each on every folder below base as it is
// opened (with its path under base); it returns the last one, open.
func openNoFollow(base, rel string, each func(p string, f *os.File) error) (*os.File, error) {
	cur, err := os.Open(base)
	if err != nil {
		return nil, err
	}
	p := ""
	for _, name := range strings.Split(rel, "/") {
		p = path.Join(p, name)
		fd, err := unix.Openat(int(cur.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		cur.Close()
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
		cur = os.NewFile(uintptr(fd), p)
		if err := each(p, cur); err != nil {
			cur.Close()
			return nil, err
		}
	}
	return cur, nil
}

// Bounds of a failed refresh's retries.
const (
	identityRetryMin = 5 * time.Second
	identityRetryMax = time.Minute
)

// keepIdentity replaces the environment's tokens at each refresh time
// until stop or done closes. A failed fetch is retried with backoff; the
// environment's log says so once, and again once it recovered.
func (a *Agent) keepIdentity(ctx context.Context, node, id string, files runtimes.Files, refresh time.Time, stop, done <-chan struct{}, log *slog.Logger) {
	wait := time.Until(refresh)
	retry := identityRetryMin
	failing := false
	for {
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-timer.C:
		case <-stop:
			timer.Stop()
			return
		case <-done:
			timer.Stop()
			return
		case <-ctx.Done():
			timer.Stop()
			return
		}
		next, err := a.writeIdentity(ctx, node, id, files)
		switch {
		case err == nil:
			if failing {
				a.logf(id, "identity tokens refreshed again")
			}
			failing, retry, wait = false, identityRetryMin, time.Until(next)
		case statusOf(err) == http.StatusConflict || errors.Is(err, context.Canceled):
			// Not running any more (or the agent stops): nothing to keep.
			return
		default:
			if !failing {
				a.logf(id, "identity tokens not refreshed (retrying): %v", err)
				log.Warn("identity tokens not refreshed", "err", err)
			}
			failing, wait = true, retry
			retry = min(retry*2, identityRetryMax)
		}
	}
}
