package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/envlease/envlease/shared/client"
)

// Profile is one API and the token used with it.
type Profile struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	// Who the token was at login, for whoami without a call and for people
	// reading the file.
	Organization string `json:"organization,omitempty"`
	User         string `json:"user,omitempty"`
	KeyID        string `json:"keyId,omitempty"`
	// Sandbox is this machine's sandbox at that API, registered (and its
	// join key redeemed) by `sandbox register`; leases name it.
	Sandbox     string `json:"sandbox,omitempty"`
	SandboxName string `json:"sandboxName,omitempty"`
}

// Config is the file os.UserConfigDir()/envlease/config.json. It holds
// tokens, so it is written with mode 0600 in a folder of mode 0700.
type Config struct {
	Default  string              `json:"default,omitempty"`
	Profiles map[string]*Profile `json:"profiles"`
}

var profileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no folder for the configuration: %w", err)
	}
	return filepath.Join(dir, "envlease", "config.json"), nil
}

// loadConfig reads the configuration; a missing file is an empty one.
func loadConfig() (*Config, string, error) {
	path, err := configPath()
	if err != nil {
		return nil, "", err
	}
	c := &Config{Profiles: map[string]*Profile{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, path, nil
	}
	if err != nil {
		return nil, path, err
	}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	if c.Profiles == nil {
		c.Profiles = map[string]*Profile{}
	}
	return c, path, nil
}

// save writes the configuration through a temporary file and a rename, so
// a crash never leaves half a file, and never with wider permissions.
func (c *Config) save(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// MkdirAll keeps an existing folder's mode; this folder is ours alone.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// profileName resolves which profile a command uses: --profile, then
// ENVLEASE_PROFILE, then the config's default, then "default".
func (a *app) profileName(c *Config) (string, error) {
	name := a.profileFlag
	if name == "" {
		name = a.getenv("ENVLEASE_PROFILE")
	}
	if name == "" {
		name = c.Default
	}
	if name == "" {
		name = "default"
	}
	if !profileName.MatchString(name) {
		return "", usagef("profile %q: use letters, digits, '.', '_' and '-' (at most 64)", name)
	}
	return name, nil
}

// session is a resolved profile and a client for it.
type session struct {
	name    string
	profile Profile
	// profileAPI is set when the API in use is the profile's (ENVLEASE_URL
	// may point elsewhere), and ownSandbox when the profile's sandbox is
	// one of it.
	profileAPI, ownSandbox bool
	client                 *client.Client
}

// session resolves the profile and the ENVLEASE_URL / ENVLEASE_TOKEN
// overrides into a client.
func (a *app) session() (*session, error) {
	cfg, _, err := loadConfig()
	if err != nil {
		return nil, err
	}
	name, err := a.profileName(cfg)
	if err != nil {
		return nil, err
	}
	s := &session{name: name}
	if p := cfg.Profiles[name]; p != nil {
		s.profile = *p
	}
	url, token := s.profile.URL, s.profile.Token
	if v := a.getenv("ENVLEASE_URL"); v != "" {
		var fixed string
		if url, fixed = withScheme("ENVLEASE_URL", v); fixed != "" {
			a.say("%s", fixed)
		}
	}
	if v := a.getenv("ENVLEASE_TOKEN"); v != "" {
		token = v
	}
	if url != "" && token == "" {
		// A CI job with an OIDC identity needs no stored token (oidc.go).
		t, err := a.ciToken(url)
		if err != nil {
			return nil, err
		}
		token = t
	}
	if url == "" || token == "" {
		return nil, &authError{msg: fmt.Sprintf("not logged in (profile %q): run 'envlease login --url URL', or set ENVLEASE_URL and ENVLEASE_TOKEN", name)}
	}
	c, err := a.newClient(url, token)
	if err != nil {
		return nil, usagef("%v", err)
	}
	s.client = c
	s.profileAPI = c.BaseURL() == s.profile.URL
	s.ownSandbox = s.profile.Sandbox != "" && s.profileAPI
	return s, nil
}

// updateProfile changes the named profile in the file and saves it.
func updateProfile(name string, f func(c *Config, p *Profile)) error {
	cfg, path, err := loadConfig()
	if err != nil {
		return err
	}
	p := cfg.Profiles[name]
	if p == nil {
		p = &Profile{}
		cfg.Profiles[name] = p
	}
	f(cfg, p)
	return cfg.save(path)
}
