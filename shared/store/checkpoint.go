package store

import (
	"encoding/json"

	"github.com/envlease/envlease/shared/domain"
)

// checkpointText is an environment's checkpoint as its item keeps it.
func checkpointText(c *domain.Checkpoint) string {
	if c == nil {
		return ""
	}
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	return string(b)
}

// checkpointOf reads it back; a text that does not read is no checkpoint.
func checkpointOf(s string) *domain.Checkpoint {
	if s == "" {
		return nil
	}
	var c domain.Checkpoint
	if json.Unmarshal([]byte(s), &c) != nil {
		return nil
	}
	if c.Sealed != nil {
		t := c.Sealed.UTC()
		c.Sealed = &t
	}
	c.Requested = c.Requested.UTC()
	return &c
}
