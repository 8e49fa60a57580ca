package devstack

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"unicode/utf8"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The typed reads of the in-process client (inprocessread.go) hand the SDK
// the items the front keeps in DynamoDB's JSON, as the SDK's deserializer
// would have made them from the same JSON: each value a new one, owned by
// the caller (strings are immutable and so shared; maps, slices, bytes and
// the value structs are new). Anything this does not read as a DynamoDB
// attribute value is an error, and the read then goes the JSON way, which
// gives whatever the SDK makes of it.

var errWireValue = errors.New("devstack: not a DynamoDB attribute value")

// sdkItem decodes an item's attributes, each in DynamoDB's JSON, into the
// SDK's attribute values.
func sdkItem(attrs map[string]json.RawMessage) (map[string]ddbtypes.AttributeValue, error) {
	out := make(map[string]ddbtypes.AttributeValue, len(attrs))
	for name, raw := range attrs {
		d := wireDecoder{b: raw}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		if d.skipSpace(); d.i != len(d.b) {
			return nil, errWireValue
		}
		out[name] = v
	}
	return out, nil
}

// wireDecoder reads DynamoDB's JSON from b, at i.
type wireDecoder struct {
	b []byte
	i int
}

func (d *wireDecoder) skipSpace() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c, after any space.
func (d *wireDecoder) byte(c byte) bool {
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// boolean consumes true or false.
func (d *wireDecoder) boolean() (bool, error) {
	d.skipSpace()
	rest := d.b[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		d.i += 4
		return true, nil
	case len(rest) >= 5 && string(rest[:5]) == "false":
		d.i += 5
		return false, nil
	}
	return false, errWireValue
}

// str reads a JSON string. Most are plain (printable ASCII or valid UTF-8,
// nothing escaped) and are copied as they are; one with escapes is read by
// encoding/json, as the SDK's decoder reads it.
func (d *wireDecoder) str() (string, error) {
	if !d.byte('"') {
		return "", errWireValue
	}
	start := d.i
	plain := true
	ascii := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			body := d.b[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(body) {
				return "", errWireValue // never kept; left to the SDK
			}
			if plain {
				return string(body), nil
			}
			var s string
			if err := json.Unmarshal(d.b[start-1:d.i], &s); err != nil {
				return "", errWireValue
			}
			return s, nil
		case c == '\\':
			plain = false
			d.i += 2
			continue
		case c < 0x20:
			return "", errWireValue
		case c >= 0x80:
			ascii = false
		}
		d.i++
	}
	return "", errWireValue
}

func (d *wireDecoder) binary() ([]byte, error) {
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	p, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errWireValue
	}
	return p, nil
}

// list reads a JSON array, each element with elem.
func (d *wireDecoder) list(elem func() error) error {
	if !d.byte('[') {
		return errWireValue
	}
	if d.byte(']') {
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		if d.byte(']') {
			return nil
		}
		if !d.byte(',') {
			return errWireValue
		}
	}
}

// value reads one attribute value: an object of exactly one member, its
// type.
func (d *wireDecoder) value() (ddbtypes.AttributeValue, error) {
	if !d.byte('{') {
		return nil, errWireValue
	}
	typ, err := d.str()
	if err != nil || !d.byte(':') {
		return nil, errWireValue
	}
	var v ddbtypes.AttributeValue
	switch typ {
	case "S":
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberS{Value: s}
	case "N":
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberN{Value: s}
	case "B":
		p, err := d.binary()
		if err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberB{Value: p}
	case "BOOL":
		b, err := d.boolean()
		if err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberBOOL{Value: b}
	case "NULL":
		b, err := d.boolean()
		if err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberNULL{Value: b}
	case "SS", "NS":
		ss := []string{}
		if err := d.list(func() error {
			s, err := d.str()
			ss = append(ss, s)
			return err
		}); err != nil {
			return nil, err
		}
		if typ == "SS" {
			v = &ddbtypes.AttributeValueMemberSS{Value: ss}
		} else {
			v = &ddbtypes.AttributeValueMemberNS{Value: ss}
		}
	case "BS":
		bs := [][]byte{}
		if err := d.list(func() error {
			p, err := d.binary()
			bs = append(bs, p)
			return err
		}); err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberBS{Value: bs}
	case "L":
		l := []ddbtypes.AttributeValue{}
		if err := d.list(func() error {
			e, err := d.value()
			l = append(l, e)
			return err
		}); err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberL{Value: l}
	case "M":
		m, err := d.members()
		if err != nil {
			return nil, err
		}
		v = &ddbtypes.AttributeValueMemberM{Value: m}
	default:
		return nil, errWireValue
	}
	if !d.byte('}') {
		return nil, errWireValue // a second member, or no end
	}
	return v, nil
}

// members reads a map's attributes: a JSON object of attribute values.
func (d *wireDecoder) members() (map[string]ddbtypes.AttributeValue, error) {
	if !d.byte('{') {
		return nil, errWireValue
	}
	m := map[string]ddbtypes.AttributeValue{}
	if d.byte('}') {
		return m, nil
	}
	for {
		name, err := d.str()
		if err != nil || !d.byte(':') {
			return nil, errWireValue
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[name] = v
		if d.byte('}') {
			return m, nil
		}
		if !d.byte(',') {
			return nil, errWireValue
		}
	}
}

// wireKeyValues encodes values of a key type (S, N, B) in DynamoDB's JSON,
// as the SDK sends them; ok is false when one is of another type or holds
// a string the SDK would send as another (not valid UTF-8). A nil map is
// nil.
func wireKeyValues(values map[string]ddbtypes.AttributeValue) (map[string]json.RawMessage, bool) {
	if values == nil {
		return nil, true
	}
	out := make(map[string]json.RawMessage, len(values))
	for name, v := range values {
		var typ, body string
		switch x := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			typ, body = "S", x.Value
		case *ddbtypes.AttributeValueMemberN:
			typ, body = "N", x.Value
		case *ddbtypes.AttributeValueMemberB:
			if x.Value == nil {
				return nil, false // the SDK sends {"B":null}: the JSON way judges it
			}
			typ, body = "B", base64.StdEncoding.EncodeToString(x.Value)
		default:
			return nil, false
		}
		if !utf8.ValidString(name) || !utf8.ValidString(body) {
			return nil, false
		}
		var b bytes.Buffer
		b.WriteString(`{"`)
		b.WriteString(typ)
		b.WriteString(`":`)
		writeJSONString(&b, body)
		b.WriteByte('}')
		out[name] = b.Bytes()
	}
	return out, true
}
