package console_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

// An upload goes from the browser straight to object storage through the
// presigned URL (the API never sees the bytes), between the create and the
// complete calls, with a progress bar on screen that ends full; the sealed
// artifact has the file's bytes.
func TestConsoleUploadDirect(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	// Uploads are read at 4 MB/s by the stack's side, as over a real
	// network: the bar then has time to show the parts between empty and
	// full. (The browser's own network emulation differs between Chromium
	// releases; a throttle in front of object storage needs none of it.)
	stack := clienttest.Start(t, clienttest.WithUploadRate(4<<20))
	api, _ := url.Parse(stack.URL)
	content := make([]byte, 6<<20)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(file, content, 0o644); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	type request struct {
		method string
		url    *url.URL
		body   int
	}
	var (
		mu       sync.Mutex
		requests []request
	)
	err := chromedp.Listen(b.ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			u, err := url.Parse(e.Request.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
				return
			}
			n := 0
			for _, p := range e.Request.PostDataEntries {
				n += len(p.Bytes)
			}
			mu.Lock()
			requests = append(requests, request{e.Request.Method, u, n})
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "artifacts page", chromedp.Navigate(stack.URL+"/#/artifacts"), chromedp.WaitVisible(chromedp.CSS("details.panel summary")))
	b.do(t, "choose the file",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.SetUploadFiles(chromedp.CSS("input[type=file]"), []string{file}))
	// Every value the bar takes (the value attribute reflects it).
	eval[bool](t, b, `(() => {
		const p = document.querySelector('#upload-progress');
		window.__progress = [];
		new MutationObserver(() => window.__progress.push(p.value)).observe(p, { attributes: true, attributeFilter: ['value'] });
		return true; })()`)
	mu.Lock()
	requests = nil
	mu.Unlock()
	b.do(t, "upload", submit("form[aria-label='Upload an artifact']"))
	b.until(t, "uploaded", `document.body.textContent.includes('Uploaded big.bin') || !!document.querySelector('#artifact-result .error')`)
	if msg := eval[string](t, b, `document.querySelector('#artifact-result .error')?.textContent || ''`); msg != "" {
		t.Fatalf("upload failed: %s", msg)
	}
	b.shot(t, "upload")

	if !eval[bool](t, b, `(() => { const p = document.querySelector('#upload-progress'); const r = p.getBoundingClientRect();
		return r.width > 50 && r.height > 4 && getComputedStyle(p).visibility === 'visible'; })()`) {
		t.Error("the progress bar is not on screen")
	}
	progress := eval[[]float64](t, b, `window.__progress`)
	t.Logf("progress values: %v", progress)
	if len(progress) == 0 || progress[len(progress)-1] != 100 {
		t.Errorf("the progress bar went %v, want it to end at 100", progress)
	}
	between := false
	for _, v := range progress {
		between = between || (v > 0 && v < 100)
	}
	if !between {
		t.Errorf("the progress bar went %v: never between empty and full", progress)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] < progress[i-1] {
			t.Errorf("the progress bar went back: %v", progress)
			break
		}
	}

	// The order of calls: create, the parts straight to storage, complete.
	mu.Lock()
	defer mu.Unlock()
	var seq []string
	for _, r := range requests {
		switch {
		case r.url.Host == api.Host && r.method == "POST" && r.url.Path == "/v1/artifacts":
			seq = append(seq, "create")
		case r.url.Host == api.Host && r.method == "POST" && strings.HasSuffix(r.url.Path, "/complete"):
			seq = append(seq, "complete")
		case r.method == "PUT":
			if r.url.Host == api.Host {
				t.Errorf("a PUT went to the API: %s", r.url)
			}
			if !strings.Contains(r.url.RawQuery, "X-Amz-Signature=") {
				t.Errorf("a PUT to %s is not through a presigned URL", r.url.Redacted())
			}
			if len(seq) == 0 || seq[len(seq)-1] != "put" {
				seq = append(seq, "put")
			}
		case r.url.Host == api.Host && r.body > len(content)/2:
			t.Errorf("%s %s carried %d bytes to the API", r.method, r.url.Path, r.body)
		}
	}
	if strings.Join(seq, ",") != "create,put,complete" {
		t.Errorf("calls %v, want create, the PUTs to storage, complete", seq)
	}

	// What was sealed is the file.
	var list struct {
		Artifacts []struct {
			ID    string `json:"id"`
			Name  string `json:"name"`
			Size  int64  `json:"size"`
			State string `json:"state"`
		} `json:"artifacts"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/artifacts", nil, &list)
	if len(list.Artifacts) != 1 || list.Artifacts[0].Size != int64(len(content)) {
		t.Fatalf("artifacts %+v", list.Artifacts)
	}
	var link struct {
		URL string `json:"url"`
	}
	apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/artifacts/"+list.Artifacts[0].ID+"/links", map[string]any{"expires": "15m"}, &link)
	res, err := http.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Equal(got, content) {
		t.Errorf("the sealed artifact has %d bytes, not the file's %d", len(got), len(content))
	}
}
