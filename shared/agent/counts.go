package agent

// Running says how many environments the agent runs, until each one's
// teardown is done (its runtime removed what it left on the node).
func (a *Agent) Running() int { return a.count() }

// MakingBoxes says whether the node is making boxes ahead of claims now
// (confine.PreparedBoxes): what a benchmark waits out before it measures.
func (a *Agent) MakingBoxes() bool { return a.prepared().Filling() }

// BoxesMadeAhead says how many boxes made ahead the node holds ready, and
// whether it makes any (it does as root, unless turned off).
func (a *Agent) BoxesMadeAhead() (ready int, makes bool) {
	return a.prepared().Ready(), a.prepared() != nil
}

// WarmReady says how many warm environments of the template are ready to
// be handed out: what a benchmark of warm leases waits for between leases.
func (a *Agent) WarmReady(template string) int {
	a.warm.mu.Lock()
	defer a.warm.mu.Unlock()
	n := 0
	for _, x := range a.warm.ready[template] {
		if alive(x.h) {
			n++
		}
	}
	return n
}
