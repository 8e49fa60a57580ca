package domain

import (
	"regexp"
	"sort"
	"unicode"
	"unicode/utf8"
)

// Label limits; artifacts take the same labels.
const (
	MaxLabels        = 32
	MaxLabelValueLen = 256
)

var labelKeyPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)

// ValidateLabels applies the label rules; the error names the offending label.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalid("labels", "at most %d labels are allowed, got %d", MaxLabels, len(labels))
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same label first every time
	for _, k := range keys {
		v := labels[k]
		if len(k) < 1 || len(k) > 63 || !labelKeyPattern.MatchString(k) {
			return Invalid("labels", "labels: key %q must be 1-63 characters of a-z, 0-9, '.', '_', '-', starting and ending with a letter or digit", truncate(k, 80))
		}
		if len(v) > MaxLabelValueLen {
			return Invalid("labels."+k, "labels.%s: value must be at most %d bytes", k, MaxLabelValueLen)
		}
		if !utf8.ValidString(v) {
			return Invalid("labels."+k, "labels.%s: value must be UTF-8", k)
		}
		for _, r := range v {
			if unicode.IsControl(r) {
				return Invalid("labels."+k, "labels.%s: value must not contain control characters", k)
			}
		}
	}
	return nil
}
