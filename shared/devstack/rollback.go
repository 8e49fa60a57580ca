package devstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/truora/minidyn/core"
	"github.com/truora/minidyn/server"
	"github.com/truora/minidyn/types"
)

// rollbackGuard repairs what minidyn's rollback of a cancelled transaction
// breaks. minidyn (v0.8.2) undoes a TransactWriteItems that fails (a
// condition not met: a lease refused by its quota, say) by restoring a copy
// of every table the transaction touched, taken before it ran; its copy
// turns an empty list or map attribute, at any depth of any item of the
// table, into a value of no type. From then on every expression evaluated
// over such an item (a key condition, a filter, a condition, an update)
// fails with "ValidationException: unsupported expression or attribute type
// … &types.Item{… all nil …}" until a restart. The address record of
// failed authentications keeps a list that can be empty, and every request
// reads it: one refused lease in a crowd then broke every route.
//
// The guard keeps, before each TransactWriteItems, its own copy of the
// items of the transaction's tables that hold an empty list or map, and
// when the transaction did not succeed puts them back into the restored
// table. minidyn exports its table type but keeps the tables themselves
// unexported, so the guard reaches them by reflection; newRollbackGuard
// fails when minidyn's layout is not the one it knows, so a new minidyn
// version is looked at again rather than trusted. Every operation but the
// reads is serialised with the repair (minidyn serialises every operation
// on one lock anyway), and reads wait while a repair runs.
type rollbackGuard struct {
	next   http.Handler
	tables map[string]*core.Table
	mu     sync.RWMutex
}

func newRollbackGuard(s *server.Server) (*rollbackGuard, error) {
	tables, err := minidynTables(s)
	if err != nil {
		return nil, err
	}
	return &rollbackGuard{next: s, tables: tables}, nil
}

// minidynTables reaches the tables of a minidyn server: Server.client
// (*server.Client), then Client.tables.
func minidynTables(s *server.Server) (map[string]*core.Table, error) {
	unexported := func(v reflect.Value, name string) (reflect.Value, bool) {
		f := v.FieldByName(name)
		if !f.IsValid() {
			return reflect.Value{}, false
		}
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), true
	}
	layout := errors.New("devstack: minidyn's server is not laid out as rollback.go knows (Server.client.tables); check that its rollback of a cancelled transaction still needs the guard, and adapt it")
	client, ok := unexported(reflect.ValueOf(s).Elem(), "client")
	if !ok || client.Kind() != reflect.Pointer || client.IsNil() {
		return nil, layout
	}
	tables, ok := unexported(client.Elem(), "tables")
	if !ok {
		return nil, layout
	}
	m, ok := tables.Interface().(map[string]*core.Table)
	if !ok {
		return nil, layout
	}
	return m, nil
}

func (g *rollbackGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	if target[strings.LastIndex(target, ".")+1:] != "TransactWriteItems" {
		// Everything else runs beside everything else but a transaction,
		// as without the guard (minidyn serialises the operations on its
		// own lock, not their decoding and encoding).
		g.mu.RLock()
		defer g.mu.RUnlock()
		g.next.ServeHTTP(w, r)
		return
	}
	// A transaction runs alone: nothing changes the tables while the guard
	// copies them, and nothing reads them between minidyn's rollback and
	// the guard's repair.
	g.mu.Lock()
	defer g.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	kept := g.keep(transactTables(body))
	rec := httptest.NewRecorder()
	g.next.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		// Cancelled, and rolled back: put the kept items back. (Refused
		// before it ran, the kept items are what is there already.)
		for table, items := range kept {
			t := g.tables[table]
			for k, item := range items {
				if _, ok := t.Data[k]; ok {
					t.Data[k] = item
				}
			}
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// keep copies the items of the named tables that hold an empty list or
// map. It costs a pass over the tables, as minidyn's own copy of them for
// the rollback does.
func (g *rollbackGuard) keep(names []string) map[string]map[string]map[string]*types.Item {
	kept := map[string]map[string]map[string]*types.Item{}
	for _, name := range names {
		t, ok := g.tables[name]
		if !ok {
			continue
		}
		for k, item := range t.Data {
			if !holdsEmpty(item) {
				continue
			}
			if kept[name] == nil {
				kept[name] = map[string]map[string]*types.Item{}
			}
			kept[name][k] = copyAttrs(item)
		}
	}
	return kept
}

// transactTables names the tables a TransactWriteItems request writes to.
func transactTables(body []byte) []string {
	var in struct {
		TransactItems []map[string]struct {
			TableName string `json:"TableName"`
		} `json:"TransactItems"`
	}
	if json.Unmarshal(body, &in) != nil {
		return nil
	}
	var out []string
	for _, ti := range in.TransactItems {
		for _, op := range ti {
			if op.TableName != "" && !slices.Contains(out, op.TableName) {
				out = append(out, op.TableName)
			}
		}
	}
	return out
}

// holdsEmpty reports whether any attribute is, or holds, an empty list or map.
func holdsEmpty(attrs map[string]*types.Item) bool {
	for _, v := range attrs {
		if v == nil {
			continue
		}
		if (v.L != nil && len(v.L) == 0) || (v.M != nil && len(v.M) == 0) || holdsEmpty(v.M) {
			return true
		}
		for _, e := range v.L {
			if holdsEmpty(map[string]*types.Item{"": e}) {
				return true
			}
		}
	}
	return false
}

// copyAttrs copies an item to the last byte, keeping empty lists and maps
// empty rather than absent (minidyn's own copy does not).
func copyAttrs(attrs map[string]*types.Item) map[string]*types.Item {
	if attrs == nil {
		return nil
	}
	out := make(map[string]*types.Item, len(attrs))
	for k, v := range attrs {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v *types.Item) *types.Item {
	if v == nil {
		return nil
	}
	clone := func(p *string) *string {
		if p == nil {
			return nil
		}
		s := *p
		return &s
	}
	cloneBool := func(p *bool) *bool {
		if p == nil {
			return nil
		}
		b := *p
		return &b
	}
	cloneStrings := func(in []*string) []*string {
		if in == nil {
			return nil
		}
		out := make([]*string, len(in))
		for i, s := range in {
			out[i] = clone(s)
		}
		return out
	}
	out := &types.Item{
		B: bytes.Clone(v.B), BOOL: cloneBool(v.BOOL), NULL: cloneBool(v.NULL), S: clone(v.S), N: clone(v.N),
		SS: cloneStrings(v.SS), NS: cloneStrings(v.NS), M: copyAttrs(v.M),
	}
	if v.BS != nil {
		out.BS = make([][]byte, len(v.BS))
		for i, b := range v.BS {
			out.BS[i] = bytes.Clone(b)
		}
	}
	if v.L != nil {
		out.L = make([]*types.Item, len(v.L))
		for i, e := range v.L {
			out.L[i] = copyValue(e)
		}
	}
	return out
}
