package console_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// netLogLines is a network log as a node keeps it: a DNS question, an
// allowed connection, and a refused one.
const netLogLines = `{"time":"2026-11-28T12:00:00Z","proto":"dns","name":"github.com","type":"A","answers":["140.82.121.4"],"rule":"allow github.com","verdict":"allow"}
{"time":"2026-11-28T12:00:01Z","proto":"tcp","addr":"140.82.121.4","port":443,"name":"github.com","nameFrom":"sni","rule":"allow github.com","verdict":"allow","sent":1200,"received":52000,"durationMs":310}
{"time":"2026-11-28T12:00:02Z","proto":"tcp","addr":"93.184.215.14","port":443,"name":"evil.example","nameFrom":"sni","rule":"no allow entry","verdict":"deny"}
`

// An ended environment's page shows the network log its node kept, one row
// a record, the refused ones marked so.
func TestConsoleNetworkLog(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t, clienttest.WithTemplates("acme", domain.Template{
		Name: "quitter", Runtime: "process", Command: []string{"sh", "-c", "exit 3"},
		Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
		Quota:    domain.Quota{MaxLeases: 2},
	}))
	var r struct {
		Environment struct {
			ID string `json:"id"`
		} `json:"environment"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "quitter"}, &r)
	ended := r.Environment.ID
	ctx := context.Background()
	var e domain.Environment
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if e, err = stack.Store.GetEnvironment(ctx, "acme", ended); err == nil && e.State == domain.StateFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s", ended, e.State)
		}
	}

	// The network log, kept as its node keeps it: an artifact the
	// environment links to.
	sum := sha256.Sum256([]byte(netLogLines))
	size := int64(len(netLogLines))
	var created struct {
		Artifact domain.Artifact `json:"artifact"`
		Upload   domain.Upload   `json:"upload"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/artifacts", map[string]any{
		"name": "network-log.jsonl", "contentType": "application/x-ndjson", "size": size, "sha256": hex.EncodeToString(sum[:]),
	}, &created)
	for _, part := range created.Upload.Parts {
		req, _ := http.NewRequest(part.Method, part.URL, bytes.NewReader([]byte(netLogLines)[part.Offset:part.Offset+part.Size]))
		for k, v := range part.Headers {
			req.Header.Set(k, v)
		}
		req.ContentLength = part.Size
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode/100 != 2 {
			t.Fatalf("upload: %v %v", res, err)
		}
		res.Body.Close()
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/artifacts/"+created.Artifact.ID+"/complete", map[string]any{}, nil)
	after := e
	after.NetworkLog = created.Artifact.ID
	if _, done, err := stack.Store.ReplaceEnvironment(ctx, e, after); err != nil || !done {
		t.Fatalf("link the network log: %v %v", done, err)
	}

	b := newBrowser(t)
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "the ended environment", chromedp.Navigate(stack.URL+"/#/environments/"+ended))
	b.until(t, "its kept network log", `(document.querySelector('#env-netlog-summary')?.textContent || '').includes('3 records, 1 refused')`)
	b.until(t, "the refusal marked", `(() => {
		const rows = [...document.querySelectorAll('#env-netlog tr[data-net-record]')];
		const refused = rows.filter((r) => r.classList.contains('net-refused'));
		return rows.length === 3 && refused.length === 1 &&
			refused[0].textContent.includes('evil.example (sni) 93.184.215.14:443') &&
			refused[0].textContent.includes('refused') && refused[0].textContent.includes('no allow entry') &&
			rows[1].textContent.includes('allowed') && rows[1].textContent.includes('50.8 KiB');
	})()`)
	b.shot(t, "environment-network-log")
}
