package devstack

import "github.com/truora/minidyn/server"

// Minidyn is the embedded minidyn server, exposed so tests can make it fail
// (EmulateFailure, EmulateFailureForTable, EmulateUnprocessedItems). The
// front answers the plain reads itself (dynamofast.go); while any failure
// or unprocessed-items emulation is on, it hands every request to minidyn,
// so the emulation fails requests exactly as minidyn alone would.
type Minidyn struct {
	*server.Server
	front *minidynFront
}

// EmulateFailure sets minidyn's failure for every request
// (server.FailureConditionNone clears it).
func (m *Minidyn) EmulateFailure(c server.FailureCondition) {
	if m == nil {
		return
	}
	m.front.emulate("fail", "", c != server.FailureConditionNone)
	m.Server.EmulateFailure(c)
}

// EmulateFailureForTable sets minidyn's failure for a table, or one of its
// indexes.
func (m *Minidyn) EmulateFailureForTable(table string, c server.FailureCondition, index ...string) {
	if m == nil {
		return
	}
	scope := table
	for _, ix := range index {
		scope += "\x00" + ix
	}
	m.front.emulate("fail-table", scope, c != server.FailureConditionNone)
	m.Server.EmulateFailureForTable(table, c, index...)
}

// EmulateUnprocessedItems makes minidyn leave the matching requests of a
// batch on table unprocessed (nil clears it).
func (m *Minidyn) EmulateUnprocessedItems(table string, match func(n int, raw map[string]*server.AttributeValue) bool) {
	if m == nil {
		return
	}
	m.front.emulate("unprocessed", table, match != nil)
	m.Server.EmulateUnprocessedItems(table, match)
}

// ClearUnprocessedItems clears every EmulateUnprocessedItems.
func (m *Minidyn) ClearUnprocessedItems() {
	if m == nil {
		return
	}
	m.front.mu.Lock()
	for k := range m.front.emulations {
		if k.kind == "unprocessed" {
			delete(m.front.emulations, k)
		}
	}
	m.front.mu.Unlock()
	m.Server.ClearUnprocessedItems()
}

// emulationKey is one emulation that is on: its kind and its scope.
type emulationKey struct{ kind, scope string }

func (f *minidynFront) emulate(kind, scope string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on {
		f.emulations[emulationKey{kind, scope}] = true
	} else {
		delete(f.emulations, emulationKey{kind, scope})
	}
}
