package devstack

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// The front answers the plain reads itself, from the items it keeps in key
// order: a GetItem or a BatchGetItem by key, and a Query whose key condition
// it reads, with no filter or projection expression. Loading a read's items
// into minidyn and asking it cost more than all the rest of a request; the
// answer is the same, since a read changes nothing and the front holds the
// items as minidyn last left them. Anything else about a read (a projection,
// a filter, Select, consumed capacity, an odd key, a start key off the
// query's partition, a failure emulation that is on) goes to minidyn as
// before, and so does every request DynamoDB would refuse: the front answers
// only what it checked to be valid, and minidyn judges the rest and gives
// its error shapes. The checks follow DynamoDB: the key has exactly the
// table's key attributes, of their defined types, no string key empty; a
// batch names at most 100 keys, none twice; a query uses every name and
// value it defines, and a consistent read of a global index is refused.

// maxFastPage bounds what the front puts in one answer; a larger read goes
// to minidyn, as before (DynamoDB pages a query at 1 MB, a batch at 16 MB).
const maxFastPage = 512 << 10

// fastRead answers op itself when it can; ok is false when minidyn must.
func (f *minidynFront) fastRead(op string, body []byte) (answer, bool) {
	if len(f.emulations) > 0 {
		return answer{}, false
	}
	switch op {
	case "GetItem":
		return f.fastGetItem(body)
	case "BatchGetItem":
		return f.fastBatchGetItem(body)
	case "Query":
		return f.fastQuery(body)
	}
	return answer{}, false
}

// decodeStrict decodes a request, failing on any field v does not name: a
// field the fast path does not handle sends the request to minidyn.
func decodeStrict(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(v) != nil {
		return false
	}
	// Nothing may follow the one JSON value.
	_, err := dec.Token()
	return err != nil
}

// noCapacity reports whether a ReturnConsumedCapacity asks for nothing.
func noCapacity(rc string) bool { return rc == "" || rc == "NONE" }

// validKey reads key when it is a valid primary key of t: exactly its key
// attributes, each a non-empty string as defined. Keys of other types go
// to minidyn (numbers compare by value, which the front's map keys do not).
func (t *tableData) validKey(key map[string]json.RawMessage) (itemKey, bool) {
	want := 1
	if t.schema.rangeAttr != "" {
		want = 2
	}
	if len(key) != want {
		return itemKey{}, false
	}
	for _, attr := range []string{t.schema.hashAttr, t.schema.rangeAttr} {
		if attr == "" {
			continue
		}
		raw, ok := key[attr]
		if !ok || t.attrTypes[attr] != "S" {
			return itemKey{}, false
		}
		v, ok := parseKeyValue(raw)
		if !ok || v.typ != "S" || v.s == "" {
			return itemKey{}, false
		}
	}
	return t.keyFromAttrs(key)
}

// validationError is DynamoDB's answer to a request it refuses as invalid.
func validationError(msg string) answer {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazon.coral.validate#ValidationException", "message": msg})
	a := jsonAnswer(body)
	a.status = http.StatusBadRequest
	return a
}

func jsonAnswer(body []byte) answer {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	return answer{status: http.StatusOK, header: h, body: body}
}

func (f *minidynFront) fastGetItem(body []byte) (answer, bool) {
	var in struct {
		TableName              string
		Key                    map[string]json.RawMessage
		ConsistentRead         *bool
		ReturnConsumedCapacity string
	}
	if !decodeStrict(body, &in) || !noCapacity(in.ReturnConsumedCapacity) {
		return answer{}, false
	}
	t := f.tables[in.TableName]
	if t == nil {
		return answer{}, false
	}
	k, ok := t.validKey(in.Key)
	if !ok {
		return answer{}, false
	}
	it := t.items[k]
	if it == nil {
		return jsonAnswer([]byte("{}")), true
	}
	var b bytes.Buffer
	b.Grow(len(it.raw) + 10)
	b.WriteString(`{"Item":`)
	b.Write(it.raw)
	b.WriteString(`}`)
	return jsonAnswer(b.Bytes()), true
}

func (f *minidynFront) fastBatchGetItem(body []byte) (answer, bool) {
	var in struct {
		RequestItems map[string]struct {
			Keys           []map[string]json.RawMessage
			ConsistentRead *bool
		}
		ReturnConsumedCapacity string
	}
	if !decodeStrict(body, &in) || !noCapacity(in.ReturnConsumedCapacity) || len(in.RequestItems) == 0 {
		return answer{}, false
	}
	n := 0
	var b bytes.Buffer
	b.WriteString(`{"Responses":{`)
	firstTable := true
	for name, req := range in.RequestItems {
		t := f.tables[name]
		if t == nil || len(req.Keys) == 0 {
			return answer{}, false
		}
		n += len(req.Keys)
		if n > 100 {
			return answer{}, false
		}
		if !firstTable {
			b.WriteByte(',')
		}
		firstTable = false
		writeJSONString(&b, name)
		b.WriteString(`:[`)
		seen := make(map[itemKey]bool, len(req.Keys))
		first := true
		for _, key := range req.Keys {
			k, ok := t.validKey(key)
			if !ok {
				return answer{}, false // minidyn refuses it as DynamoDB does
			}
			if seen[k] {
				// minidyn reads the key twice; DynamoDB refuses the batch.
				return validationError("Provided list of item keys contains duplicates"), true
			}
			seen[k] = true
			it := t.items[k]
			if it == nil {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			b.Write(it.raw)
			if b.Len() > maxFastPage {
				return answer{}, false
			}
		}
		b.WriteByte(']')
	}
	b.WriteString(`},"UnprocessedKeys":{}}`)
	return jsonAnswer(b.Bytes()), true
}

// fastQuery answers a query whose key condition the front reads, without
// filter or projection: the index's items in the partition and range, after
// the start key, no more than Limit, projected as the index projects, with
// LastEvaluatedKey once Limit items were read, as DynamoDB does.
func (f *minidynFront) fastQuery(body []byte) (answer, bool) {
	var in queryInput
	if !decodeStrict(body, &in) {
		return answer{}, false
	}
	page, ok := f.readQuery(in)
	if !ok {
		return answer{}, false
	}
	t, ix, items := page.t, page.ix, page.items
	var b bytes.Buffer
	b.Grow(page.size + 64)
	b.WriteString(`{"Count":`)
	b.WriteString(strconv.Itoa(len(items)))
	b.WriteString(`,"Items":[`)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		if ix.projection == "ALL" {
			b.Write(it.raw)
			continue
		}
		writeAttrs(&b, it.attrs, func(attr string) bool { return ix.projects(t, attr) })
	}
	b.WriteString(`],"ScannedCount":`)
	b.WriteString(strconv.Itoa(len(items)))
	if page.more {
		last := items[len(items)-1]
		b.WriteString(`,"LastEvaluatedKey":`)
		writeAttrs(&b, last.attrs, page.lastKeyAttr)
	}
	b.WriteByte('}')
	return jsonAnswer(b.Bytes()), true
}

// queryPage is a page of a query the front answers itself: the items it
// read of an index of t, in order, their size in DynamoDB's JSON, and
// whether the page ends with a LastEvaluatedKey (Limit items were read).
type queryPage struct {
	t     *tableData
	ix    *orderedIndex
	items []*storedItem
	size  int
	more  bool
}

// lastKeyAttr selects the attributes of the page's LastEvaluatedKey: the
// table's and the index's keys.
func (p queryPage) lastKeyAttr(attr string) bool {
	return p.t.schema.has(attr) || p.ix.schema.has(attr)
}

// readQuery reads the page a query asks for, when the front answers it
// itself (its caller holds the lock); ok is false when minidyn must.
func (f *minidynFront) readQuery(in queryInput) (queryPage, bool) {
	if !noCapacity(in.ReturnConsumedCapacity) {
		return queryPage{}, false
	}
	if in.Limit != nil && *in.Limit < 1 {
		return queryPage{}, false
	}
	t := f.tables[in.TableName]
	if t == nil {
		return queryPage{}, false
	}
	ix := t.primary
	if in.IndexName != "" {
		if ix = t.indexes[in.IndexName]; ix == nil {
			return queryPage{}, false
		}
		if in.ConsistentRead != nil && *in.ConsistentRead {
			return queryPage{}, false // refused on a global index
		}
	}
	if !usesEvery(in.KeyConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues) {
		return queryPage{}, false
	}
	kc, ok := parseKeyCondition(in.KeyConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, ix.schema)
	if !ok || !kc.valid(t, ix.schema) {
		return queryPage{}, false
	}
	var start *indexEntry
	if in.ExclusiveStartKey != nil {
		e, ok := t.startEntry(ix, in.ExclusiveStartKey)
		if !ok || compareKeys(e.hash, kc.hash) != 0 {
			return queryPage{}, false
		}
		start = &e
	}
	forward := in.ScanIndexForward == nil || *in.ScanIndexForward
	limit := -1
	if in.Limit != nil {
		limit = *in.Limit
	}
	page := queryPage{t: t, ix: ix}
	ix.walk(kc.hash, kc.rng, forward, start, func(e indexEntry) bool {
		page.items = append(page.items, e.item)
		page.size += len(e.item.raw)
		return (limit < 0 || len(page.items) < limit) && page.size <= maxFastPage
	})
	if page.size > maxFastPage {
		return queryPage{}, false
	}
	page.more = limit > 0 && len(page.items) == limit
	return page, true
}

func (ks keySchema) has(attr string) bool {
	return attr != "" && (attr == ks.hashAttr || attr == ks.rangeAttr)
}

// projects reports whether the index holds attr of its items: the table's
// and its own keys, and what its projection names.
func (ix *orderedIndex) projects(t *tableData, attr string) bool {
	switch {
	case ix.projection == "ALL", t.schema.has(attr), ix.schema.has(attr):
		return true
	case ix.projection == "INCLUDE":
		return ix.include[attr]
	}
	return false
}

// valid reports whether the condition's values are of the key attributes'
// types, no string empty, and a BETWEEN's bounds in order: DynamoDB refuses
// the others, and minidyn then answers.
func (kc keyCondition) valid(t *tableData, ks keySchema) bool {
	ok := func(attr string, v keyValue) bool {
		return v.edge != 0 || (v.typ == t.attrTypes[attr] && v.typ == "S" && v.s != "")
	}
	if !ok(ks.hashAttr, kc.hash) || kc.hash.edge != 0 {
		return false
	}
	r := kc.rng
	if !ok(ks.rangeAttr, r.lower) || !ok(ks.rangeAttr, r.upper) {
		return false
	}
	if r.prefix != nil && !ok(ks.rangeAttr, *r.prefix) {
		return false
	}
	return compareKeys(r.lower, r.upper) <= 0
}

// startEntry reads an ExclusiveStartKey made of exactly the table's and the
// index's key attributes.
func (t *tableData) startEntry(ix *orderedIndex, key map[string]json.RawMessage) (indexEntry, bool) {
	for attr := range key {
		if !t.schema.has(attr) && !ix.schema.has(attr) {
			return indexEntry{}, false
		}
	}
	h, r, ok := ix.schema.keyOf(key)
	if !ok {
		return indexEntry{}, false
	}
	base, ok := t.keyFromAttrs(key)
	if !ok {
		return indexEntry{}, false
	}
	return indexEntry{hash: h, rng: r, base: base}, true
}

// usesEvery reports whether expr names every #name and :value defined (an
// unused one is a ValidationException on DynamoDB).
func usesEvery(expr string, names map[string]string, values map[string]json.RawMessage) bool {
	toks, _ := tokenize(expr)
	used := map[string]bool{}
	for _, tok := range toks {
		used[tok] = true
	}
	for n := range names {
		if !used[n] {
			return false
		}
	}
	for v := range values {
		if !used[v] {
			return false
		}
	}
	return true
}

// writeAttrs writes the attributes keep selects as one JSON object.
func writeAttrs(b *bytes.Buffer, attrs map[string]json.RawMessage, keep func(string) bool) {
	b.WriteByte('{')
	first := true
	for name, raw := range attrs {
		if !keep(name) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeJSONString(b, name)
		b.WriteByte(':')
		b.Write(raw)
	}
	b.WriteByte('}')
}

func writeJSONString(b *bytes.Buffer, s string) {
	if !strings.ContainsAny(s, "\"\\<>&") && isPlainASCII(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
