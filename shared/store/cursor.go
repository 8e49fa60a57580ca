package store

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// sortCursor is the position after the last item of a page of a listing
// ordered by "<time>#<id>" in an organization's index partition: that
// partition, the sort key and the id. The start key is rebuilt from the
// caller's own organization and listing, and a cursor of another listing (or
// another organization) is refused, not quietly read as a position here.
type sortCursor struct {
	Partition string `json:"p"`
	SK        string `json:"s"`
	ID        string `json:"i"`
}

// maxCursorLen bounds what is decoded at all: a cursor we hand out is about
// 100 characters.
const maxCursorLen = 512

func encodeSortCursor(partition, sk, id string) string {
	b, _ := json.Marshal(sortCursor{Partition: partition, SK: sk, ID: id}) // strings always encode
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeSortCursor accepts exactly what encodeSortCursor made for the listing
// of partition, whose sort keys are times in layout, '#', and the id: every
// field is checked in full (shape, partition, id, time), so nothing a client
// invents reaches DynamoDB as a start key it would refuse.
func decodeSortCursor(s, partition, layout string) (sortCursor, bool) {
	if len(s) > maxCursorLen {
		return sortCursor{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return sortCursor{}, false
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var c sortCursor
	if err := dec.Decode(&c); err != nil || dec.More() || c.Partition != partition || !idOK(c.ID) {
		return sortCursor{}, false
	}
	at, ok := strings.CutSuffix(c.SK, "#"+c.ID)
	if !ok {
		return sortCursor{}, false
	}
	if _, err := time.Parse(layout, at); err != nil || len(at) != len(layout) {
		return sortCursor{}, false
	}
	return c, true
}
