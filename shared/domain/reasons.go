package domain

import "strings"

// StopReasons is the vocabulary of stopReason, in the order docs list it.
var StopReasons = []string{StopDeleted, StopIdle, StopExpired, StopBudget, StopRetention, StopExited, StopOutOfMemory, StopOutOfDisk,
	StopFailed, StopNodeLost, StopNodeLeft, StopNodeRevoked}

// NodeStopReasons are the reasons a node may report with an end
// (nodes.Report.Reason): what it saw of the environment itself.
var NodeStopReasons = []string{StopExited, StopOutOfMemory, StopOutOfDisk, StopFailed}

// oldStopReasons are the values stored before the vocabulary: a stored
// environment still reads with today's word.
var oldStopReasons = map[string]string{
	"hard": StopExpired,
	"lost": StopNodeLost,
	"left": StopNodeLeft,
	"node": StopExited,
}

// NormalizeStopReason maps a stored stopReason to the vocabulary.
func NormalizeStopReason(r string) string {
	if n, ok := oldStopReasons[r]; ok {
		return n
	}
	return r
}

// StopReasonOf says which reason an error a node reported names (the
// agent's errors say out_of_memory and out_of_disk, or "out of memory"),
// or def.
func StopReasonOf(errText, def string) string {
	switch {
	case strings.Contains(errText, StopOutOfMemory) || strings.Contains(errText, "out of memory"):
		return StopOutOfMemory
	case strings.Contains(errText, StopOutOfDisk):
		return StopOutOfDisk
	}
	return def
}
