package main

import (
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/openapi/check"
)

// The API description and the service list the same operations: a route
// added to any group without being described fails here, and so does an
// operation described but served by no group. (The response validator then
// holds every described operation to its responses.)
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	v, err := check.Default()
	if err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for _, op := range v.Operations() {
		described[op] = true
	}
	served := map[string]bool{}
	// Building the groups does no I/O, so they are built over clients that
	// point nowhere.
	d := deps{s3: s3.New(s3.Options{Region: "us-east-1"}), bucket: "envlease", clock: clock.System{}}
	for _, g := range routes(d) {
		for _, rt := range g {
			// The console's files are not part of the API.
			if rt.Access == httpapi.Static {
				continue
			}
			served[rt.Method+" "+rt.Path] = true
		}
	}
	var missing, extra []string
	for op := range served {
		if !described[op] {
			missing = append(missing, op)
		}
	}
	for op := range described {
		if !served[op] {
			extra = append(extra, op)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("served but not in shared/openapi/openapi.yaml: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("in shared/openapi/openapi.yaml but served by no group: %v", extra)
	}
}
