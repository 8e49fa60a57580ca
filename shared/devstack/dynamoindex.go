package devstack

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"

	"github.com/google/btree"
)

// keyValue is one key attribute's value, ordered as DynamoDB orders keys:
// strings and binaries by their bytes, numbers by value. edge marks the
// bounds used to start and stop a walk: -1 sorts before every value, +1
// after. It is comparable, so it can be part of a map key.
type keyValue struct {
	typ  string // "S", "N" or "B"; "" for an absent range key
	s    string // the string, the number as sent, or the decoded bytes
	edge int8
}

var (
	keyMin = keyValue{edge: -1}
	keyMax = keyValue{edge: 1}
)

func compareKeys(a, b keyValue) int {
	if a.edge != b.edge {
		if a.edge < b.edge {
			return -1
		}
		return 1
	}
	if a.edge != 0 {
		return 0
	}
	if a.typ != b.typ {
		return strings.Compare(a.typ, b.typ)
	}
	if a.typ == "N" {
		x, okx := new(big.Float).SetPrec(200).SetString(a.s)
		y, oky := new(big.Float).SetPrec(200).SetString(b.s)
		if okx && oky {
			if c := x.Cmp(y); c != 0 {
				return c
			}
		}
	}
	return strings.Compare(a.s, b.s)
}

// parseKeyValue reads an attribute value's wire form ({"S":"x"}) when it is
// of a key type.
func parseKeyValue(raw json.RawMessage) (keyValue, bool) {
	// Most keys are plain strings, as the SDK writes them: {"S":"..."}
	// with nothing to unescape.
	if len(raw) >= 8 && string(raw[:6]) == `{"S":"` && string(raw[len(raw)-2:]) == `"}` {
		if body := raw[6 : len(raw)-2]; bytes.IndexByte(body, '"') < 0 && bytes.IndexByte(body, '\\') < 0 {
			return keyValue{typ: "S", s: string(body)}, true
		}
	}
	var av struct{ S, N, B *string }
	if err := json.Unmarshal(raw, &av); err != nil {
		return keyValue{}, false
	}
	switch {
	case av.S != nil && av.N == nil && av.B == nil:
		return keyValue{typ: "S", s: *av.S}, true
	case av.N != nil && av.S == nil && av.B == nil:
		return keyValue{typ: "N", s: *av.N}, true
	case av.B != nil && av.S == nil && av.N == nil:
		b, err := base64.StdEncoding.DecodeString(*av.B)
		if err != nil {
			return keyValue{}, false
		}
		return keyValue{typ: "B", s: string(b)}, true
	}
	return keyValue{}, false
}

// itemKey is an item's primary key: the map key of a table's items.
type itemKey struct{ hash, rng keyValue }

func compareItemKeys(a, b itemKey) int {
	if c := compareKeys(a.hash, b.hash); c != 0 {
		return c
	}
	return compareKeys(a.rng, b.rng)
}

// storedItem is one item as the client last wrote it, in wire form, with
// its attributes split out so keys can be read without decoding values.
// raw and attrs never change once the item is stored (a write stores a new
// item), so the typed reads decode them after letting go of the lock.
type storedItem struct {
	key   itemKey
	raw   json.RawMessage
	attrs map[string]json.RawMessage
	// places are its entries in the indexes it is in, kept so that
	// replacing it need not read its keys again.
	places []place
}

type place struct {
	ix *orderedIndex
	e  indexEntry
}

// indexEntry is an item's place in one index (the table's own key order is
// one too): the index's keys, then the table's as the tie-break.
type indexEntry struct {
	hash, rng keyValue
	base      itemKey
	item      *storedItem
}

func lessEntry(a, b indexEntry) bool {
	if c := compareKeys(a.hash, b.hash); c != 0 {
		return c < 0
	}
	if c := compareKeys(a.rng, b.rng); c != 0 {
		return c < 0
	}
	return compareItemKeys(a.base, b.base) < 0
}

// keySchema names a table's or an index's key attributes; rangeAttr is ""
// when it has only a partition key.
type keySchema struct{ hashAttr, rangeAttr string }

// keyOf reads the schema's key from an item's attributes; ok is false when
// the item lacks one (for an index: the item is not in it).
func (ks keySchema) keyOf(attrs map[string]json.RawMessage) (hash, rng keyValue, ok bool) {
	raw, found := attrs[ks.hashAttr]
	if !found {
		return keyValue{}, keyValue{}, false
	}
	if hash, ok = parseKeyValue(raw); !ok {
		return keyValue{}, keyValue{}, false
	}
	if ks.rangeAttr == "" {
		return hash, keyValue{}, true
	}
	raw, found = attrs[ks.rangeAttr]
	if !found {
		return keyValue{}, keyValue{}, false
	}
	rng, ok = parseKeyValue(raw)
	return hash, rng, ok
}

// orderedIndex keeps the entries of one index in key order, so a query
// walks only its partition's range.
type orderedIndex struct {
	schema  keySchema
	entries *btree.BTreeG[indexEntry]
	// projection is the index's ProjectionType ("ALL" for the table's own
	// order); include names the non-key attributes an INCLUDE projects.
	projection string
	include    map[string]bool
}

func newOrderedIndex(ks keySchema) *orderedIndex {
	return &orderedIndex{schema: ks, entries: btree.NewG(32, lessEntry), projection: "ALL"}
}

func (ix *orderedIndex) entryOf(it *storedItem) (indexEntry, bool) {
	h, r, ok := ix.schema.keyOf(it.attrs)
	if !ok {
		return indexEntry{}, false
	}
	return indexEntry{hash: h, rng: r, base: it.key, item: it}, true
}

// tableData is what the front keeps of one table: its items and every
// index over them in order.
type tableData struct {
	name   string
	schema keySchema
	// attrTypes are the key attributes' types ("S", "N", "B") from the
	// table's AttributeDefinitions.
	attrTypes map[string]string
	items     map[itemKey]*storedItem
	primary   *orderedIndex
	indexes   map[string]*orderedIndex
}

func newTableData(name string, ks keySchema) *tableData {
	return &tableData{
		name: name, schema: ks, items: map[itemKey]*storedItem{}, attrTypes: map[string]string{},
		primary: newOrderedIndex(ks), indexes: map[string]*orderedIndex{},
	}
}

// keyFromAttrs reads an item's primary key from a key map or a whole item.
func (t *tableData) keyFromAttrs(attrs map[string]json.RawMessage) (itemKey, bool) {
	h, r, ok := t.schema.keyOf(attrs)
	return itemKey{h, r}, ok
}

// set stores the item now found under k (nil: none), keeping every index
// in step.
func (t *tableData) set(k itemKey, it *storedItem) error {
	if old := t.items[k]; old != nil {
		t.unindex(old)
		delete(t.items, k)
	}
	if it == nil {
		return nil
	}
	it.key, it.places = k, nil
	if it.attrs == nil {
		if err := json.Unmarshal(it.raw, &it.attrs); err != nil {
			return err
		}
	}
	t.items[k] = it
	t.index(it)
	return nil
}

func (t *tableData) index(it *storedItem) {
	for _, ix := range t.allIndexes() {
		if e, ok := ix.entryOf(it); ok {
			ix.entries.ReplaceOrInsert(e)
			it.places = append(it.places, place{ix, e})
		}
	}
}

func (t *tableData) unindex(it *storedItem) {
	for _, p := range it.places {
		p.ix.entries.Delete(p.e)
	}
	it.places = nil
}

func (t *tableData) allIndexes() []*orderedIndex {
	out := make([]*orderedIndex, 0, 1+len(t.indexes))
	out = append(out, t.primary)
	for _, ix := range t.indexes {
		out = append(out, ix)
	}
	return out
}

// addIndex builds a new index over the items already stored.
func (t *tableData) addIndex(name string, ks keySchema, projection string, include []string) {
	ix := newOrderedIndex(ks)
	if projection != "" {
		ix.projection = projection
	}
	ix.include = map[string]bool{}
	for _, a := range include {
		ix.include[a] = true
	}
	for _, it := range t.items {
		if e, ok := ix.entryOf(it); ok {
			ix.entries.ReplaceOrInsert(e)
			it.places = append(it.places, place{ix, e})
		}
	}
	t.indexes[name] = ix
}

// keyRange is what a key condition allows of the range key: bounds, each
// inclusive or not, and a prefix (begins_with).
type keyRange struct {
	lower, upper         keyValue
	lowerIncl, upperIncl bool
	prefix               *keyValue
}

func fullRange() keyRange {
	return keyRange{lower: keyMin, upper: keyMax, lowerIncl: true, upperIncl: true}
}

// below and above report whether v lies before or after the range.
func (r keyRange) below(v keyValue) bool {
	if c := compareKeys(v, r.lower); c < 0 || (c == 0 && !r.lowerIncl) {
		return true
	}
	if r.prefix != nil && compareKeys(v, *r.prefix) < 0 {
		return true
	}
	return false
}

func (r keyRange) above(v keyValue) bool {
	if c := compareKeys(v, r.upper); c > 0 || (c == 0 && !r.upperIncl) {
		return true
	}
	// Values with a prefix are contiguous from the prefix itself: one that
	// sorts at or after it without having it is past all of them.
	if r.prefix != nil && v.typ == r.prefix.typ && !strings.HasPrefix(v.s, r.prefix.s) && compareKeys(v, *r.prefix) > 0 {
		return true
	}
	return false
}

// walk visits, in order (or in reverse), the entries of partition hash whose
// range key lies in r, starting after the entry at start when start is set,
// until visit returns false.
func (ix *orderedIndex) walk(hash keyValue, r keyRange, forward bool, start *indexEntry, visit func(indexEntry) bool) {
	in := func(e indexEntry) bool {
		if compareKeys(e.hash, hash) != 0 {
			return false
		}
		if start != nil && !lessEntry(*start, e) && !lessEntry(e, *start) {
			return true // the start entry itself: the walk begins after it
		}
		before, past := r.below, r.above
		if !forward {
			before, past = r.above, r.below
		}
		if before(e.rng) {
			return true
		}
		if past(e.rng) {
			return false
		}
		return visit(e)
	}
	if forward {
		lo := r.lower
		if r.prefix != nil && compareKeys(*r.prefix, lo) > 0 {
			lo = *r.prefix
		}
		pivot := indexEntry{hash: hash, rng: lo, base: itemKey{keyMin, keyMin}}
		if start != nil && lessEntry(pivot, *start) {
			pivot = *start
		}
		ix.entries.AscendGreaterOrEqual(pivot, in)
		return
	}
	pivot := indexEntry{hash: hash, rng: r.upper, base: itemKey{keyMax, keyMax}}
	if start != nil && lessEntry(*start, pivot) {
		pivot = *start
	}
	ix.entries.DescendLessOrEqual(pivot, in)
}

// keyCondition is a parsed KeyConditionExpression: the partition's value and
// what is asked of the range key.
type keyCondition struct {
	hash keyValue
	rng  keyRange
}

// parseKeyCondition reads the key conditions DynamoDB accepts ("h = :v",
// optionally AND one range clause: a comparison, BETWEEN or begins_with,
// with names through #aliases). ok is false for anything else; the caller
// then hands minidyn the whole index, which is slow but decides the same.
func parseKeyCondition(expr string, names map[string]string, values map[string]json.RawMessage, ks keySchema) (keyCondition, bool) {
	toks, ok := tokenize(expr)
	if !ok {
		return keyCondition{}, false
	}
	p := &condParser{toks: toks, names: names, values: values}
	var clauses []condClause
	for {
		c, ok := p.clause()
		if !ok {
			return keyCondition{}, false
		}
		clauses = append(clauses, c)
		if p.done() {
			break
		}
		if !p.keyword("AND") {
			return keyCondition{}, false
		}
	}
	kc := keyCondition{rng: fullRange()}
	hashSet, rangeSet := false, false
	for _, c := range clauses {
		switch {
		case c.attr == ks.hashAttr && c.op == "=" && !hashSet:
			kc.hash, hashSet = c.vals[0], true
		case c.attr == ks.rangeAttr && ks.rangeAttr != "" && !rangeSet:
			rangeSet = true
			v := c.vals[0]
			switch c.op {
			case "=":
				kc.rng.lower, kc.rng.upper = v, v
			case "<":
				kc.rng.upper, kc.rng.upperIncl = v, false
			case "<=":
				kc.rng.upper = v
			case ">":
				kc.rng.lower, kc.rng.lowerIncl = v, false
			case ">=":
				kc.rng.lower = v
			case "BETWEEN":
				kc.rng.lower, kc.rng.upper = v, c.vals[1]
			case "begins_with":
				if v.typ == "N" {
					return keyCondition{}, false
				}
				kc.rng.prefix = &v
			default:
				return keyCondition{}, false
			}
		default:
			return keyCondition{}, false
		}
	}
	return kc, hashSet
}

type condClause struct {
	attr string
	op   string
	vals []keyValue
}

type condParser struct {
	toks   []string
	pos    int
	names  map[string]string
	values map[string]json.RawMessage
}

func (p *condParser) done() bool { return p.pos >= len(p.toks) }

func (p *condParser) next() string {
	if p.done() {
		return ""
	}
	t := p.toks[p.pos]
	p.pos++
	return t
}

func (p *condParser) keyword(k string) bool {
	if !p.done() && strings.EqualFold(p.toks[p.pos], k) {
		p.pos++
		return true
	}
	return false
}

func (p *condParser) attr() (string, bool) {
	t := p.next()
	if strings.HasPrefix(t, "#") {
		n, ok := p.names[t]
		return n, ok
	}
	if t == "" || strings.HasPrefix(t, ":") || strings.ContainsAny(t, "(),<>=") {
		return "", false
	}
	return t, true
}

func (p *condParser) value() (keyValue, bool) {
	t := p.next()
	raw, ok := p.values[t]
	if !strings.HasPrefix(t, ":") || !ok {
		return keyValue{}, false
	}
	return parseKeyValue(raw)
}

// clause reads one comparison, BETWEEN or begins_with, in parentheses or not.
func (p *condParser) clause() (condClause, bool) {
	if p.keyword("(") {
		c, ok := p.clause()
		if !ok || !p.keyword(")") {
			return condClause{}, false
		}
		return c, true
	}
	if p.keyword("begins_with") {
		if !p.keyword("(") {
			return condClause{}, false
		}
		a, ok := p.attr()
		if !ok || !p.keyword(",") {
			return condClause{}, false
		}
		v, ok := p.value()
		if !ok || !p.keyword(")") {
			return condClause{}, false
		}
		return condClause{attr: a, op: "begins_with", vals: []keyValue{v}}, true
	}
	a, ok := p.attr()
	if !ok {
		return condClause{}, false
	}
	if p.keyword("BETWEEN") {
		lo, ok1 := p.value()
		and := p.keyword("AND")
		hi, ok2 := p.value()
		if !ok1 || !and || !ok2 {
			return condClause{}, false
		}
		return condClause{attr: a, op: "BETWEEN", vals: []keyValue{lo, hi}}, true
	}
	op := p.next()
	switch op {
	case "=", "<", "<=", ">", ">=":
	default:
		return condClause{}, false
	}
	v, ok := p.value()
	if !ok {
		return condClause{}, false
	}
	return condClause{attr: a, op: op, vals: []keyValue{v}}, true
}

// tokenize splits a key condition into names, placeholders, operators,
// parentheses and commas.
func tokenize(expr string) ([]string, bool) {
	var toks []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == ',' || c == '=':
			toks = append(toks, string(c))
			i++
		case c == '<' || c == '>':
			if i+1 < len(expr) && (expr[i+1] == '=' || (c == '<' && expr[i+1] == '>')) {
				toks = append(toks, expr[i:i+2])
				i += 2
			} else {
				toks = append(toks, string(c))
				i++
			}
		default:
			j := i
			for j < len(expr) && !strings.ContainsRune(" \t\n\r(),=<>", rune(expr[j])) {
				j++
			}
			toks = append(toks, expr[i:j])
			i = j
		}
	}
	return toks, len(toks) > 0
}
