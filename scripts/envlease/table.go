package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// table writes aligned columns; the first row is the header.
type table struct {
	w *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		// A tab or newline in a value (a name, say) would break the columns.
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c)
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// details writes "KEY  value" lines, for one record.
func details(w io.Writer, kv ...string) error {
	t := newTable(w)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			t.row(kv[i], kv[i+1])
		}
	}
	return t.flush()
}

// ago writes a time relative to now: "3m ago", "in 2h", and the time itself
// once it is more than a day away.
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	switch {
	case d > 24*time.Hour || d < -24*time.Hour:
		return t.Local().Format("2006-01-02 15:04")
	case d >= 0:
		return "in " + short(d)
	default:
		return short(-d) + " ago"
	}
}

func agoPtr(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return ago(*t, now)
}

// short writes a duration rounded to its largest units: 2h5m, 14m, 45s.
func short(d time.Duration) string {
	if d < time.Minute-time.Second/2 {
		d = d.Round(time.Second)
	} else {
		d = d.Round(time.Minute)
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	default:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m != 0 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	}
}

// size writes a byte count in binary units.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// labels writes k=v pairs in key order.
func labels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

// exports writes an environment's services: web 127.0.0.1:24311->127.0.0.1:8080.
func exports(es []domain.EnvExport) string {
	var out []string
	for _, e := range es {
		s := e.Service
		switch {
		case e.Listen != "" && e.Target != "":
			s += " " + e.Listen + "->" + e.Target
		case e.Listen != "":
			s += " " + e.Listen
		case e.Target != "":
			s += " ->" + e.Target
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
