package usage

import "time"

// DayLayout is the form of a usage day: a UTC calendar date.
const DayLayout = "2006-01-02"

// Entry is one usage record of the API (spec 2.6): seconds of environment
// time of one template on one UTC day.
type Entry struct {
	// Template is set when grouped by template (the default).
	Template string `json:"template,omitempty"`
	// Value is the group's value when grouped by anything else ("" is the
	// group of environments without one, e.g. no project).
	Value   *string `json:"value,omitempty"`
	Day     string  `json:"day"`
	Seconds int64   `json:"seconds"`
	// Cost is the seconds' cost, each day at its own rate, when the
	// organization set rates.
	Cost *float64 `json:"cost,omitempty"`
}

// DaySeconds is the part of an interval that falls on one UTC day.
type DaySeconds struct {
	Day     string
	Seconds int64
}

// Split cuts [from, to) at every UTC midnight and returns the whole seconds
// on each day, oldest first; days with no seconds are left out. Both ends are
// truncated to the second first, so the parts add up exactly to the
// interval's whole seconds and a retried stop writes the same numbers.
func Split(from, to time.Time) []DaySeconds {
	from, to = from.UTC().Truncate(time.Second), to.UTC().Truncate(time.Second)
	var out []DaySeconds
	for from.Before(to) {
		midnight := time.Date(from.Year(), from.Month(), from.Day()+1, 0, 0, 0, 0, time.UTC)
		end := to
		if midnight.Before(end) {
			end = midnight
		}
		out = append(out, DaySeconds{Day: from.Format(DayLayout), Seconds: int64(end.Sub(from) / time.Second)})
		from = end
	}
	return out
}

// DayStart is the UTC midnight that begins t's day.
func DayStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// GroupEntry is one item of a grouped ledger: seconds of one template on one
// UTC day, of the environments whose value in grouping Dim was Value.
type GroupEntry struct {
	Dim      string
	Value    string
	Template string
	Day      string
	Seconds  int64
}
