package netstack

import (
	"strings"
	"testing"
)

// An environment holds at most MaxFlows connections and UDP flows open
// through its boundary: one more is refused with the bound as its rule,
// and a place comes back when a flow ends.
func TestBoundaryBoundsOpenFlows(t *testing.T) {
	b := newBoundary(Config{MaxFlows: 3})
	for i := range 3 {
		if _, ok := b.admit(); !ok {
			t.Fatalf("flow %d refused below the bound", i+1)
		}
	}
	d, ok := b.admit()
	if ok {
		t.Fatal("a fourth flow was admitted with MaxFlows 3")
	}
	if d.Allow || !strings.Contains(d.Rule, "3 open connections") {
		t.Errorf("refused with %+v, want the bound named as its rule", d)
	}
	b.release()
	if _, ok := b.admit(); !ok {
		t.Error("a flow was refused after one ended")
	}
	if def := newBoundary(Config{}); def.cfg.MaxFlows != DefaultMaxFlows {
		t.Errorf("default MaxFlows %d, want %d", def.cfg.MaxFlows, DefaultMaxFlows)
	}
}
