package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDecodeTrigger(t *testing.T) {
	sample := func(name string) string {
		raw, err := os.ReadFile(filepath.Join("..", "..", "events", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	rec := func(id, source string, at int64) string {
		b, _ := json.Marshal(map[string]any{"eventID": id, "eventName": "INSERT", "eventSource": source,
			"dynamodb": map[string]any{"ApproximateCreationDateTime": at, "Keys": map[string]any{"PK": map[string]string{"S": "EVT#acme"}}}})
		return string(b)
	}
	for _, tc := range []struct {
		name, raw string
		want      trigger
		err       string
	}{
		{name: "scheduled sample", raw: sample("scheduled-deliveries.json"),
			want: trigger{Kind: triggerSchedule, ID: "7c2f1d8b-0e3a-4b5c-8d9e-1f2a3b4c5d6e", Time: time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)}},
		{name: "stream sample", raw: sample("stream-deliveries.json"),
			want: trigger{Kind: triggerStream, ID: "c81e728d9d4c2f636f067f89cc14862c", Time: time.Unix(1773482400, 0).UTC(), Records: 1}},
		{name: "stream batch: the newest record's time", raw: `{"Records":[` + rec("a", "aws:dynamodb", 1773482400) + `,` + rec("b", "aws:dynamodb", 1773482460) + `,` + rec("c", "aws:dynamodb", 1773482430) + `]}`,
			want: trigger{Kind: triggerStream, ID: "a", Time: time.Unix(1773482460, 0).UTC(), Records: 3}},
		{name: "records of another source", raw: `{"Records":[` + rec("a", "aws:dynamodb", 1) + `,` + rec("b", "aws:kinesis", 2) + `]}`, err: "aws:kinesis"},
		{name: "empty batch", raw: `{"Records":[]}`, err: "without records"},
		{name: "another EventBridge event", raw: `{"source":"aws.events","detail-type":"Something Else"}`, err: "neither"},
		{name: "S3 notification", raw: `{"source":"aws.s3"}`, err: "neither"},
		{name: "not an object", raw: `[1,2]`, err: "invocation event"},
		{name: "not JSON", raw: `{`, err: "invocation event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeTrigger(json.RawMessage(tc.raw))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
