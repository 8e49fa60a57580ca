package check

import (
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/envlease/envlease/shared/openapi"
)

// Every request body and every response with a body, of every operation,
// carries an example, and each example matches its schema as the tests hold
// responses to it (objects closed), so an example cannot show a field the
// document does not describe or miss a required one.
func TestEveryOperationHasValidExamples(t *testing.T) {
	v, err := New(openapi.YAML)
	if err != nil {
		t.Fatal(err)
	}
	check := func(where string, content openapi3.Content) {
		for ct, mt := range content {
			var examples []any
			if mt.Example != nil {
				examples = append(examples, mt.Example)
			}
			for _, ex := range mt.Examples {
				if ex != nil && ex.Value != nil {
					examples = append(examples, ex.Value.Value)
				}
			}
			if len(examples) == 0 {
				t.Errorf("%s %s: no example", where, ct)
				continue
			}
			if mt.Schema == nil || mt.Schema.Value == nil {
				continue
			}
			for _, ex := range examples {
				if err := mt.Schema.Value.VisitJSON(ex); err != nil {
					t.Errorf("%s %s: the example does not match the schema: %v", where, ct, err)
				}
			}
		}
	}
	var ops []string
	for path, item := range v.doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			ops = append(ops, where)
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				check(where+" request", op.RequestBody.Value.Content)
			}
			for status, r := range op.Responses.Map() {
				if r.Value != nil {
					check(where+" "+status, r.Value.Content)
				}
			}
		}
	}
	sort.Strings(ops)
	if len(ops) < 30 {
		t.Fatalf("only %d operations found: %s", len(ops), strings.Join(ops, ", "))
	}
}
