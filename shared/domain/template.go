package domain

import (
	"time"

	"github.com/envlease/envlease/shared/bytesize"
	"github.com/envlease/envlease/shared/netpolicy"
)

// Template is what environments are leased from (spec 2.2).
type Template struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env"`
	Workdir     string            `json:"workdir"`
	Exports     map[string]Export `json:"exports"`
	Shares      []TemplateShare   `json:"shares"`
	Writable    []string          `json:"writable"`
	Resources   Resources         `json:"resources"`
	Runtime     string            `json:"runtime"`
	Restart     string            `json:"restart"`
	Timeouts    Timeouts          `json:"timeouts"`
	// Idle is added to the spec's record: what counts as activity, which
	// keeps its environments from idling (idle.go); absent for the default.
	Idle       *Idle    `json:"idle,omitempty"`
	Warm       int      `json:"warm"`
	Platforms  []string `json:"platforms"`
	BuildCache bool     `json:"buildCache"`
	// Network is NetworkNone (also when empty), NetworkOpen, NetworkRules
	// or NetworkEgress (network.go).
	Network string `json:"network"`
	// NetworkRules are the allow and deny entries of network open or
	// rules.
	NetworkRules *netpolicy.Rules `json:"networkRules,omitempty"`
	// Image is added to the spec's record: the root filesystem of a
	// container template (runtime "container"); absent for a process one.
	Image *Image `json:"image,omitempty"`
	// Pools is added to the spec's record: the pools that run this template.
	Pools []string `json:"pools"`
	// Quota is the organization's limit for this template.
	Quota Quota `json:"quota"`
	// Exec is added to the spec's record: false turns off commands and
	// shells inside the template's environments (envlease exec, shell);
	// absent or true allows them. See ExecAllowed.
	Exec *bool `json:"exec,omitempty"`
	// Identity, when set, gives its environments OIDC tokens envlease signs
	// (workload.go, docs/identity.md).
	Identity *TemplateIdentity `json:"identity,omitempty"`
	// Secrets are the organization secrets the network boundary adds to
	// requests to the hosts each names (docs/secrets.md); they need
	// network open or rules.
	Secrets []SecretBinding `json:"secrets,omitempty"`
}

// Bounds of a pause's retention: its checkpoint's artifact must outlive
// it, and artifacts live at most 90 days.
const (
	DefaultRetention = Duration(7 * 24 * time.Hour)
	MaxRetention     = Duration(30 * 24 * time.Hour)
)

// IdleAction is t's idle action: IdleStop or IdlePause.
func (t Template) IdleAction() string {
	if t.Idle == nil || t.Idle.Action == "" {
		return IdleStop
	}
	return t.Idle.Action
}

// PauseRetention is how long t's paused environments are kept.
func (t Template) PauseRetention() Duration {
	if t.Idle == nil || t.Idle.Retention <= 0 {
		return DefaultRetention
	}
	return t.Idle.Retention
}

// MaxPausedOrDefault is the quota of paused environments of t: the
// template's quota.maxPaused, or as many as it may run when it sets none.
func (t Template) MaxPausedOrDefault() int {
	if t.Quota.MaxPaused > 0 {
		return t.Quota.MaxPaused
	}
	if t.IdleAction() == IdlePause {
		return t.Quota.MaxLeases
	}
	return 0
}

// Export is a service a template exposes.
type Export struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol,omitempty"`
	// Public opens the export's preview host without a token (off by
	// default; an organization may forbid it: Org.ForbidPublicExports).
	Public bool `json:"public,omitempty"`
}

// TemplateShare is a folder a template can receive from the client.
type TemplateShare struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	Direction string   `json:"direction"`
	Exclude   []string `json:"exclude"`
}

// Resources are the limits an environment runs under.
type Resources struct {
	CPUs   int    `json:"cpus"`
	Memory string `json:"memory"`
	PIDs   int    `json:"pids"`
	// Disk bounds what an environment may write (its folder, shares,
	// /tmp, output): a size such as 10Gi; "" for the node's default. A node
	// refuses one beyond its maximum.
	Disk string `json:"disk,omitempty"`
}

// Timeouts are a template's idle and hard limits.
type Timeouts struct {
	Idle Duration `json:"idle"`
	Hard Duration `json:"hard"`
}

// Quota is a per-template limit for an organization.
type Quota struct {
	MaxLeases int `json:"maxLeases"`
	// MaxPaused is added to the spec's record: how many environments of
	// the template may be paused at once, apart from maxLeases (default:
	// maxLeases when its idle action is pause).
	MaxPaused int `json:"maxPaused,omitempty"`
}

// QuotaEntry is one row of GET /v1/quotas (spec 2.5).
type QuotaEntry struct {
	Template  string `json:"template"`
	MaxLeases int    `json:"maxLeases"`
	Running   int    `json:"running"`
	// MaxPaused and Paused are added to the spec's row for a template that
	// may pause (MaxPaused > 0): paused environments are counted apart from
	// running ones.
	MaxPaused int      `json:"maxPaused,omitempty"`
	Paused    *int     `json:"paused,omitempty"`
	Idle      Duration `json:"idle"`
	Hard      Duration `json:"hard"`
}

// Normalized returns t with empty collections instead of nil ones, its
// runtime defaulted to process and shares' direction defaulted to "in", so JSON shows [] and {} rather than null.
func (t Template) Normalized() Template {
	t.Runtime = t.RuntimeOrDefault()
	if t.Command == nil {
		t.Command = []string{}
	}
	if t.Env == nil {
		t.Env = map[string]string{}
	}
	if t.Exports == nil {
		t.Exports = map[string]Export{}
	}
	if t.Shares == nil {
		t.Shares = []TemplateShare{}
	}
	for i := range t.Shares {
		if t.Shares[i].Exclude == nil {
			t.Shares[i].Exclude = []string{}
		}
		if t.Shares[i].Direction == "" {
			t.Shares[i].Direction = "in"
		}
	}
	if t.Writable == nil {
		t.Writable = []string{}
	}
	if t.Platforms == nil {
		t.Platforms = []string{}
	}
	if t.Pools == nil {
		t.Pools = []string{}
	}
	if t.Network == "" {
		t.Network = NetworkNone
	}
	return t
}

// MaxTemplateExports bounds a template's exports. A lease with a sandbox
// writes one listen-port item per export in its transaction, and a stop
// deletes them in its own, beside the usage days: with this bound both stay
// inside DynamoDB's 100 actions per transaction.
const MaxTemplateExports = 32

// MaxTemplateDisk is the largest resources.disk a template may ask for: a
// node's own maximum (its -disk-max, by default as large) may be lower, and
// it then fails such an environment, saying so.
const MaxTemplateDisk = 100 << 30

// MaxTemplateShares bounds a template's shares, and so the shares of a lease
// (each with a local path of up to 4 KiB) stored in the environment item.
const MaxTemplateShares = 16

// What an environment's network reaches, as the template chooses: with
// NetworkNone (the default) nothing beyond itself; with NetworkEgress the
// public internet through the agent's proxy, never the node's or private
// addresses. Enforced where the agent runs environments in network
// namespaces of their own.
const (
	NetworkNone   = "none"
	NetworkEgress = "egress"
)

// Egress says whether t's environments may reach the outside world.
func (t Template) Egress() bool { return t.Network == NetworkEgress }

// ValidateLimits checks the bounds that keep a template's environments
// inside DynamoDB's limits, and that its network is one there is.
func (t Template) ValidateLimits() error {
	if err := t.validateNetwork(); err != nil {
		return err
	}
	if err := t.Idle.Validate(); err != nil {
		return err
	}
	if err := t.validateIdle(); err != nil {
		return err
	}
	if len(t.Secrets) > 0 && !t.Transparent() {
		return Invalid("secrets", "secrets are added at the network boundary: %s needs network %q or %q, it has %q", t.Name, NetworkOpen, NetworkRules, t.Network)
	}
	if err := ValidateSecretBindings(t.Name, t.Secrets); err != nil {
		return err
	}
	for _, r := range []struct{ field, size string }{{"resources.memory", t.Resources.Memory}, {"resources.disk", t.Resources.Disk}} {
		if r.size == "" {
			continue
		}
		n, err := bytesize.Parse(r.size)
		if err != nil {
			return Invalid(r.field, "%s of %s: %q is %v", r.field, t.Name, r.size, err)
		}
		if r.field == "resources.disk" && n > MaxTemplateDisk {
			return Invalid(r.field, "%s of %s: %s is beyond the largest disk a node gives (%s)", r.field, t.Name, r.size, bytesize.Format(MaxTemplateDisk))
		}
	}
	if len(t.Exports) > MaxTemplateExports {
		return Invalid("exports", "a template has at most %d exports, %s has %d", MaxTemplateExports, t.Name, len(t.Exports))
	}
	if len(t.Shares) > MaxTemplateShares {
		return Invalid("shares", "a template has at most %d shares, %s has %d", MaxTemplateShares, t.Name, len(t.Shares))
	}
	if t.Identity != nil {
		if err := t.Identity.Validate(t.Name); err != nil {
			return err
		}
	}
	return nil
}

func (t Template) validateIdle() error {
	if t.Quota.MaxPaused < 0 {
		return Invalid("quota.maxPaused", "quota.maxPaused of %s must not be negative", t.Name)
	}
	if t.Idle == nil {
		return nil
	}
	switch t.Idle.Action {
	case "", IdleStop, IdlePause:
	default:
		return Invalid("idle.action", "idle.action of %s must be stop or pause, not %q", t.Name, t.Idle.Action)
	}
	if r := t.Idle.Retention; r < 0 || r > MaxRetention {
		return Invalid("idle.retention", "idle.retention of %s must be from 0 (the default, %s) to %s", t.Name, DefaultRetention, MaxRetention)
	}
	return nil
}

// ExecAllowed says whether commands and shells may run inside t's
// environments: unless the template says exec: false.
func (t Template) ExecAllowed() bool { return t.Exec == nil || *t.Exec }
