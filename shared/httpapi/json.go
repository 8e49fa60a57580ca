package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/envlease/envlease/shared/domain"
)

// MaxBodyBytes is the largest request body any endpoint reads.
const MaxBodyBytes = 1 << 20

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing useful to do
}

// Decode reads a JSON object body into v strictly: unknown fields, trailing
// data, wrong types and bodies over MaxBodyBytes are refused with a message
// that names the problem. An empty body is refused too.
func Decode(r *http.Request, v any) error {
	return decode(r, v, false)
}

// DecodeOptional is Decode for endpoints whose body may be absent.
func DecodeOptional(r *http.Request, v any) error {
	return decode(r, v, true)
}

func decode(r *http.Request, v any, optional bool) error {
	if r.Body == nil {
		if optional {
			return nil
		}
		return domain.BadRequest("", "a JSON object body is required")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		return domain.BadRequest("", "could not read the request body")
	}
	if len(body) > MaxBodyBytes {
		return tooLarge()
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return domain.BadRequest("", "a JSON object body is required")
	}
	return DecodeBytes(body, v)
}

// DecodeBytes is the strict decoder behind Decode, exposed for fuzzing.
func DecodeBytes(body []byte, v any) error {
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return domain.BadRequest("", "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return domain.BadRequest("", "unexpected data after the JSON object")
	}
	return nil
}

func tooLarge() error {
	return &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes)}
}

func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return domain.BadRequest("", "malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return domain.BadRequest("", "the body must be a JSON object")
		}
		return domain.BadRequest(field, "field %q must be of type %s", field, jsonType(typ.Type.Kind().String()))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return domain.BadRequest("", "malformed JSON: unexpected end of input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return domain.BadRequest(field, "unknown field %q", field)
	default:
		var de *domain.Error
		if errors.As(err, &de) {
			return de
		}
		// Errors from a field's own UnmarshalJSON (durations, for one) carry a
		// message written for clients.
		return domain.BadRequest("", "invalid request body: %s", err.Error())
	}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	}
	return kind
}

// WriteSecret writes v like WriteJSON and forbids caching it: the body holds
// something that works as a credential (a token shown once, a join key, a
// presigned URL), which no shared or browser cache may keep.
func WriteSecret(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, status, v)
}
