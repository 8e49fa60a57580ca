package domain

import "testing"

// Environments stored before the vocabulary read with today's words (the
// store maps each on read), and the agent's errors name their reason.
func TestStopReasons(t *testing.T) {
	for old, want := range map[string]string{"hard": "expired", "lost": "node_lost", "left": "node_left", "node": "exited", "idle": "idle", "budget": "budget"} {
		if got := NormalizeStopReason(old); got != want {
			t.Errorf("%s reads %s, want %s", old, got, want)
		}
	}
	for text, want := range map[string]string{
		"container process killed: out of memory (exit 137)":   StopOutOfMemory,
		"ran out of disk (out_of_disk): its disk of 1 is full": StopOutOfDisk,
		"process exited with status 2":                         "x",
	} {
		if got := StopReasonOf(text, "x"); got != want {
			t.Errorf("%q: %s, want %s", text, got, want)
		}
	}
}
