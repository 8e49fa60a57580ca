package devstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"unsafe"

	"github.com/truora/minidyn/core"
	"github.com/truora/minidyn/server"
	"github.com/truora/minidyn/types"
)

// minidyn (v0.8.2) writes an empty list or map on the wire as a value of no
// type ({} rather than {"L":[]} or {"M":{}}): its wire type drops empty
// fields. The front keeps what a write left by reading it back, so it reads
// the typed item from minidyn's table instead of its wire answer, and
// encodes it as DynamoDB does: an item kept through the wire answer would
// make every later expression over it fail ("unsupported expression or
// attribute type … &types.Item{… all nil …}"), which is how a crowd of
// leases once broke every route of the local stack (docs/local.md).

// minidynTables reaches the tables of a minidyn server (Server.client, then
// Client.tables), which minidyn keeps unexported. It fails when minidyn's
// layout is not the one this knows, so a new minidyn version is looked at
// again rather than trusted.
func minidynTables(s *server.Server) (map[string]*core.Table, error) {
	unexported := func(v reflect.Value, name string) (reflect.Value, bool) {
		f := v.FieldByName(name)
		if !f.IsValid() {
			return reflect.Value{}, false
		}
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), true
	}
	layout := errors.New("devstack: minidyn's server is not laid out as minidyntyped.go knows (Server.client.tables); check that its wire answers still drop empty lists and maps, and adapt it")
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

// typedItem finds, among the few items the scratch table holds, the one
// whose key attributes are key's, and encodes it in DynamoDB's JSON with
// its empty lists and maps typed. ok is false when the table holds none.
func typedItem(t *core.Table, ks keySchema, key map[string]json.RawMessage) (raw json.RawMessage, ok bool, err error) {
	if t == nil {
		return nil, false, nil
	}
	for _, item := range t.Data {
		if !sameValue(item[ks.hashAttr], key[ks.hashAttr]) {
			continue
		}
		if ks.rangeAttr != "" && !sameValue(item[ks.rangeAttr], key[ks.rangeAttr]) {
			continue
		}
		b, err := json.Marshal(wireItem(item))
		return b, err == nil, err
	}
	return nil, false, nil
}

// sameValue reports whether a typed key value is the wire value want.
func sameValue(v *types.Item, want json.RawMessage) bool {
	if v == nil || len(want) == 0 {
		return false
	}
	got, err := json.Marshal(wireValue(v))
	if err != nil {
		return false
	}
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal(want, &b) != nil {
		return false
	}
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return bytes.Equal(ab, bb)
}

func wireItem(item map[string]*types.Item) map[string]any {
	out := make(map[string]any, len(item))
	for k, v := range item {
		if v != nil {
			out[k] = wireValue(v)
		}
	}
	return out
}

// wireValue is one attribute value in DynamoDB's JSON, an empty list or map
// included.
func wireValue(v *types.Item) map[string]any {
	switch {
	case v.S != nil:
		return map[string]any{"S": *v.S}
	case v.N != nil:
		return map[string]any{"N": *v.N}
	case v.B != nil:
		return map[string]any{"B": v.B}
	case v.BOOL != nil:
		return map[string]any{"BOOL": *v.BOOL}
	case v.NULL != nil:
		return map[string]any{"NULL": *v.NULL}
	case v.SS != nil:
		return map[string]any{"SS": v.SS}
	case v.NS != nil:
		return map[string]any{"NS": v.NS}
	case v.BS != nil:
		return map[string]any{"BS": v.BS}
	case v.L != nil:
		l := make([]any, 0, len(v.L))
		for _, e := range v.L {
			if e != nil {
				l = append(l, wireValue(e))
			}
		}
		return map[string]any{"L": l}
	case v.M != nil:
		return map[string]any{"M": wireItem(v.M)}
	}
	// A value of no type: minidyn's own copy of a table makes these of
	// empty lists and maps, and the front never keeps such a copy.
	return map[string]any{}
}
