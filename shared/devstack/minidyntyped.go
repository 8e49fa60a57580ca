package devstack

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
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

// typedItem finds the item of the scratch table whose key attributes are
// key's, and encodes it in DynamoDB's JSON with its empty lists and maps
// typed. ok is false when the table holds none. It looks the item up by
// minidyn's own key of it, and walks the few items the table holds only
// when that finds none (so an item minidyn keys by another spelling of its
// key is still found).
func typedItem(t *core.Table, ks keySchema, key map[string]json.RawMessage) *storedItem {
	if t == nil {
		return nil
	}
	found := func(item map[string]*types.Item) *storedItem {
		var b bytes.Buffer
		spans := make(map[string][2]int, len(item))
		writeTypedItem(&b, item, spans)
		raw := b.Bytes()
		attrs := make(map[string]json.RawMessage, len(spans))
		for k, sp := range spans {
			attrs[k] = raw[sp[0]:sp[1]:sp[1]]
		}
		return &storedItem{raw: raw, attrs: attrs}
	}
	if keyMap, ok := typedKey(ks, key); ok {
		if k, err := t.KeySchema.GetKey(t.AttributesDef, keyMap); err == nil {
			if item, ok := t.Data[k]; ok {
				return found(item)
			}
		}
	}
	for _, item := range t.Data {
		if !sameValue(item[ks.hashAttr], key[ks.hashAttr]) {
			continue
		}
		if ks.rangeAttr != "" && !sameValue(item[ks.rangeAttr], key[ks.rangeAttr]) {
			continue
		}
		return found(item)
	}
	return nil
}

// typedKey is a wire key in minidyn's types.
func typedKey(ks keySchema, key map[string]json.RawMessage) (map[string]*types.Item, bool) {
	out := make(map[string]*types.Item, 2)
	for _, attr := range []string{ks.hashAttr, ks.rangeAttr} {
		if attr == "" {
			continue
		}
		v, ok := parseKeyValue(key[attr])
		if !ok {
			return nil, false
		}
		s := v.s
		switch v.typ {
		case "S":
			out[attr] = &types.Item{S: &s}
		case "N":
			out[attr] = &types.Item{N: &s}
		case "B":
			out[attr] = &types.Item{B: []byte(s)}
		}
	}
	return out, true
}

// sameValue reports whether a typed key value is the wire value want.
func sameValue(v *types.Item, want json.RawMessage) bool {
	if v == nil || len(want) == 0 {
		return false
	}
	var b bytes.Buffer
	writeTypedValue(&b, v)
	var x, y any
	if json.Unmarshal(b.Bytes(), &x) != nil || json.Unmarshal(want, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// writeTypedItem writes an item in DynamoDB's JSON, an empty list or map
// included (minidyn's own wire form drops them). When spans is not nil it
// gets each attribute's value's place in b.
func writeTypedItem(b *bytes.Buffer, item map[string]*types.Item, spans map[string][2]int) {
	b.WriteByte('{')
	first := true
	for k, v := range item {
		if v == nil {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeJSONString(b, k)
		b.WriteByte(':')
		start := b.Len()
		writeTypedValue(b, v)
		if spans != nil {
			spans[k] = [2]int{start, b.Len()}
		}
	}
	b.WriteByte('}')
}

// writeTypedValue writes one attribute value in DynamoDB's JSON.
func writeTypedValue(b *bytes.Buffer, v *types.Item) {
	one := func(typ string, body func()) {
		b.WriteString(`{"`)
		b.WriteString(typ)
		b.WriteString(`":`)
		body()
		b.WriteByte('}')
	}
	strs := func(ss []*string) {
		b.WriteByte('[')
		for i, s := range ss {
			if i > 0 {
				b.WriteByte(',')
			}
			if s == nil {
				b.WriteString("null")
				continue
			}
			writeJSONString(b, *s)
		}
		b.WriteByte(']')
	}
	bin := func(p []byte) {
		b.WriteByte('"')
		b.WriteString(base64.StdEncoding.EncodeToString(p))
		b.WriteByte('"')
	}
	switch {
	case v.S != nil:
		one("S", func() { writeJSONString(b, *v.S) })
	case v.N != nil:
		one("N", func() { writeJSONString(b, *v.N) })
	case v.B != nil:
		one("B", func() { bin(v.B) })
	case v.BOOL != nil:
		one("BOOL", func() { b.WriteString(strconv.FormatBool(*v.BOOL)) })
	case v.NULL != nil:
		one("NULL", func() { b.WriteString(strconv.FormatBool(*v.NULL)) })
	case v.SS != nil:
		one("SS", func() { strs(v.SS) })
	case v.NS != nil:
		one("NS", func() { strs(v.NS) })
	case v.BS != nil:
		one("BS", func() {
			b.WriteByte('[')
			for i, p := range v.BS {
				if i > 0 {
					b.WriteByte(',')
				}
				bin(p)
			}
			b.WriteByte(']')
		})
	case v.L != nil:
		one("L", func() {
			b.WriteByte('[')
			first := true
			for _, e := range v.L {
				if e == nil {
					continue
				}
				if !first {
					b.WriteByte(',')
				}
				first = false
				writeTypedValue(b, e)
			}
			b.WriteByte(']')
		})
	case v.M != nil:
		one("M", func() { writeTypedItem(b, v.M, nil) })
	default:
		// A value of no type: minidyn's own copy of a table makes these of
		// empty lists and maps, and the front never keeps such a copy.
		b.WriteString("{}")
	}
}

// wireTyped decodes an item's attributes, in DynamoDB's JSON, into
// minidyn's types, as its PutItem would store them: the front keeps only the
// wire form (minidyn's typed form of an item takes twice the memory), and
// decodes the few items a request needs when it puts them into minidyn.
func wireTyped(attrs map[string]json.RawMessage) (map[string]*types.Item, error) {
	out := make(map[string]*types.Item, len(attrs))
	for k, raw := range attrs {
		v, err := wireTypedValue(raw)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

func wireTypedValue(raw json.RawMessage) (*types.Item, error) {
	if kv, ok := parseKeyValue(raw); ok {
		s := kv.s
		switch kv.typ {
		case "S":
			return &types.Item{S: &s}, nil
		case "N":
			return &types.Item{N: &s}, nil
		case "B":
			return &types.Item{B: []byte(s)}, nil
		}
	}
	var av struct {
		S, N       *string
		B          []byte
		BOOL, NULL *bool
		SS, NS     []*string
		BS         [][]byte
		L          []json.RawMessage
		M          map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &av); err != nil {
		return nil, err
	}
	it := &types.Item{S: av.S, N: av.N, B: av.B, BOOL: av.BOOL, NULL: av.NULL, SS: av.SS, NS: av.NS, BS: av.BS}
	if av.L != nil {
		it.L = make([]*types.Item, len(av.L))
		for i, e := range av.L {
			v, err := wireTypedValue(e)
			if err != nil {
				return nil, err
			}
			it.L[i] = v
		}
	}
	if av.M != nil {
		m, err := wireTyped(av.M)
		if err != nil {
			return nil, err
		}
		it.M = m
	}
	return it, nil
}
