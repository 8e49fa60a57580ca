package usage

import (
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// Grouping dimensions of usage. Template is always recorded (the ledger of
// the specification); the others are recorded only for the groupings an
// organization enables in its settings, so a stop writes one more ledger
// item per enabled grouping and no more (docs: usage and budgets).
const (
	DimTemplate = "template"
	DimProject  = "project"
	DimUser     = "user"
	// DimLabel prefixes a label key: "label:team".
	DimLabel = "label:"
)

// Limits of the settings. MaxGroupings bounds the stop's added writes;
// MaxRates bounds the settings item.
const (
	MaxGroupings = 8
	MaxRates     = 200
)

var currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)

// Settings are an organization's usage settings (GET/PUT /v1/usage/settings).
type Settings struct {
	// Currency of every rate and cost, an ISO 4217 code such as EUR.
	Currency string `json:"currency"`
	// Groupings are the dimensions recorded beside template: "project",
	// "user", "label:KEY". A lease records the groupings enabled at its lease.
	Groupings []string `json:"groupings"`
	// Rates are per template, each a list of rates per hour from a UTC day on.
	Rates map[string][]Rate `json:"rates"`
	// Since says from which day each grouping has been recorded (set by the
	// service when a grouping is added); earlier days have no grouped usage.
	Since map[string]string `json:"since"`
}

// Rate is a template's price per hour of environment time from From (a UTC
// day, YYYY-MM-DD) until the next rate's From.
type Rate struct {
	From    string  `json:"from"`
	PerHour float64 `json:"perHour"`
}

// Normalize gives empty collections for JSON and sorts rates by day.
func (s *Settings) Normalize() {
	if s.Groupings == nil {
		s.Groupings = []string{}
	}
	if s.Rates == nil {
		s.Rates = map[string][]Rate{}
	}
	if s.Since == nil {
		s.Since = map[string]string{}
	}
	for t := range s.Rates {
		sort.Slice(s.Rates[t], func(i, j int) bool { return s.Rates[t][i].From < s.Rates[t][j].From })
	}
}

// ParseDimension checks a grouping dimension: template, project, user or
// label:KEY with a valid label key.
func ParseDimension(field, d string) error {
	switch {
	case d == DimTemplate || d == DimProject || d == DimUser:
		return nil
	case strings.HasPrefix(d, DimLabel):
		k := strings.TrimPrefix(d, DimLabel)
		if err := domain.ValidateLabels(map[string]string{k: ""}); err != nil || k == "" {
			return domain.BadRequest(field, "%s: %q is not a label key (1-63 characters of a-z, 0-9, '.', '_', '-')", field, k)
		}
		return nil
	}
	return domain.BadRequest(field, "%s must be template, project, user or label:KEY, got %q", field, d)
}

// Validate checks settings an admin sends.
func (s Settings) Validate() error {
	if s.Currency != "" && !currencyPattern.MatchString(s.Currency) {
		return domain.Invalid("currency", "currency must be an ISO 4217 code of three capital letters, like EUR")
	}
	if len(s.Groupings) > MaxGroupings {
		return domain.Invalid("groupings", "at most %d groupings may be enabled (each adds one write to every stop), got %d", MaxGroupings, len(s.Groupings))
	}
	seen := map[string]bool{}
	for _, g := range s.Groupings {
		if err := ParseDimension("groupings", g); err != nil {
			return domain.Invalid("groupings", "%s", err.(*domain.Error).Message)
		}
		if g == DimTemplate {
			return domain.Invalid("groupings", "template is always recorded; list only project, user or label:KEY")
		}
		if seen[g] {
			return domain.Invalid("groupings", "grouping %q is listed twice", g)
		}
		seen[g] = true
	}
	n := 0
	for t, rs := range s.Rates {
		if err := domain.ValidateText("rates", t, 200); err != nil || t == "" {
			return domain.Invalid("rates", "rates: %q is not a template name", t)
		}
		days := map[string]bool{}
		for _, r := range rs {
			n++
			if _, err := time.Parse(DayLayout, r.From); err != nil {
				return domain.Invalid("rates."+t, "rates.%s: from must be a UTC day, YYYY-MM-DD", t)
			}
			if days[r.From] {
				return domain.Invalid("rates."+t, "rates.%s: two rates from %s", t, r.From)
			}
			days[r.From] = true
			if r.PerHour < 0 || math.IsNaN(r.PerHour) || math.IsInf(r.PerHour, 0) || r.PerHour > 1e6 {
				return domain.Invalid("rates."+t, "rates.%s: perHour must be a number from 0 to 1000000", t)
			}
		}
	}
	if n > MaxRates {
		return domain.Invalid("rates", "at most %d rates in all, got %d", MaxRates, n)
	}
	if n > 0 && s.Currency == "" {
		return domain.Invalid("currency", "rates need a currency")
	}
	return nil
}

// Enabled reports whether grouping d is recorded.
func (s Settings) Enabled(d string) bool {
	if d == DimTemplate {
		return true
	}
	for _, g := range s.Groupings {
		if g == d {
			return true
		}
	}
	return false
}

// HasRates reports whether any template has a rate, so answers carry cost.
func (s Settings) HasRates() bool {
	for _, rs := range s.Rates {
		if len(rs) > 0 {
			return true
		}
	}
	return false
}

// RateOn is the rate per hour of template on day: the latest rate whose From
// is not after day, 0 before the first. Rates are sorted (Normalize).
func (s Settings) RateOn(template, day string) float64 {
	var r float64
	for _, x := range s.Rates[template] {
		if x.From > day {
			break
		}
		r = x.PerHour
	}
	return r
}

// Cost is the cost of seconds of template on day, each day at its own rate.
func (s Settings) Cost(template, day string, seconds int64) float64 {
	return float64(seconds) / 3600 * s.RateOn(template, day)
}

// RoundCost rounds a cost to millionths for answers, so sums of grouped
// answers and the plain one agree to the digit shown.
func RoundCost(c float64) float64 { return math.Round(c*1e6) / 1e6 }

// ValueOf is e's value in grouping d ("" when it has none: no project, or
// the label not set), which is a group of its own.
func ValueOf(e domain.Environment, d string) string {
	switch {
	case d == DimTemplate:
		return e.Template
	case d == DimProject:
		return e.Project
	case d == DimUser:
		return e.CreatedBy
	case strings.HasPrefix(d, DimLabel):
		return e.Labels[strings.TrimPrefix(d, DimLabel)]
	}
	return ""
}

// Records reports whether e's seconds are recorded in grouping d.
func Records(e domain.Environment, d string) bool {
	if d == DimTemplate {
		return true
	}
	for _, g := range e.UsageBy {
		if g == d {
			return true
		}
	}
	return false
}
