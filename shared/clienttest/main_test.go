package clienttest

import (
	"slices"
	"testing"
)

// A stack serving a whole test binary fails the run when it reports a
// failure, from Start's goroutine (FailNow ends the run) or from another one
// (Errorf, as the API description check does), and runs its cleanups last
// first whatever happened.
func TestMainTB(t *testing.T) {
	cases := []struct {
		name     string
		run      func(tb *mainTB) int
		wantCode int
		failed   bool
	}{
		{"passes", func(tb *mainTB) int { return 0 }, 0, false},
		{"the tests' own code", func(tb *mainTB) int { return 3 }, 3, false},
		{"Fatalf ends the run", func(tb *mainTB) int {
			tb.Fatalf("start local s3: %v", "no binary")
			return 0
		}, 1, true},
		{"Errorf from another goroutine fails it", func(tb *mainTB) int {
			done := make(chan struct{})
			go func() {
				defer close(done)
				tb.Errorf("answer does not match the API description")
			}()
			<-done
			return 0
		}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := &mainTB{}
			var order []int
			code := tb.run(func() int {
				tb.Cleanup(func() { order = append(order, 1) })
				tb.Cleanup(func() { order = append(order, 2) })
				return c.run(tb)
			})
			tb.cleanup()
			if code != c.wantCode || tb.Failed() != c.failed {
				t.Fatalf("code %d, failed %v; want %d, %v", code, tb.Failed(), c.wantCode, c.failed)
			}
			if !slices.Equal(order, []int{2, 1}) {
				t.Fatalf("cleanups ran in order %v, want [2 1]", order)
			}
		})
	}
}
