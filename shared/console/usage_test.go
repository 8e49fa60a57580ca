package console_test

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/envlease/envlease/shared/clienttest"
)

type usageReport struct {
	Usage []struct {
		Day      string `json:"day"`
		Template string `json:"template"`
		Seconds  int64  `json:"seconds"`
	} `json:"usage"`
}

// The usage page's CSV, downloaded by the browser into a folder, holds the
// API's figures: the header, then one row per day and template, as GET
// /v1/usage answers for the same range.
func TestConsoleUsageCSV(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against the whole stack")
	}
	stack := clienttest.Start(t)
	// Environment time that no longer grows: leased, live a moment, deleted.
	var ids []string
	for _, name := range []string{"csv-a", "csv-b"} {
		var r struct {
			Environment struct {
				ID string `json:"id"`
			} `json:"environment"`
		}
		apiCall(t, stack.URL, clienttest.BobToken, "POST", "/v1/environments", map[string]any{"template": "sleeper", "name": name}, &r)
		ids = append(ids, r.Environment.ID)
	}
	time.Sleep(1500 * time.Millisecond) // a second or more of usage each
	for _, id := range ids {
		apiCall(t, stack.URL, clienttest.BobToken, "DELETE", "/v1/environments/"+id, nil, nil)
	}
	since := time.Now().UTC().Add(-13 * 24 * time.Hour).Format("2006-01-02")
	var before usageReport
	apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/usage?since="+since, nil, &before)
	if len(before.Usage) == 0 {
		t.Fatal("no usage to download")
	}

	b := newBrowser(t)
	dir := t.TempDir()
	done := make(chan cdpbrowser.EventDownloadProgress, 1)
	err := chromedp.ListenBrowser(b.ctx, func(ev any) {
		if e, ok := ev.(*cdpbrowser.EventDownloadProgress); ok && e.State != cdpbrowser.DownloadProgressStateInProgress {
			select {
			case done <- *e:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	b.do(t, "download into a folder", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: ptr(true),
		})
		return err
	}))
	b.signInByLink(t, stack.URL, clienttest.BobToken)
	b.do(t, "usage", chromedp.Navigate(stack.URL+"/#/usage"))
	b.until(t, "the download link", `!!document.querySelector('#usage a[download]')`)
	if got := eval[string](t, b, `document.querySelector('input[name=since]').value`); got != since {
		t.Fatalf("the page's range starts %s, the test asked from %s", got, since)
	}
	b.do(t, "download the CSV", chromedp.Click(chromedp.CSS("#usage a[download]")))
	var ev cdpbrowser.EventDownloadProgress
	select {
	case ev = <-done:
	case <-time.After(wait):
		t.Fatal("no download")
	}
	if ev.State != cdpbrowser.DownloadProgressStateCompleted {
		t.Fatalf("download %s", ev.State)
	}
	f, err := os.Open(filepath.Join(dir, ev.GUID))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("the download is not CSV: %v", err)
	}
	var after usageReport
	apiCall(t, stack.URL, clienttest.BobToken, "GET", "/v1/usage?since="+since, nil, &after)
	if len(rows) == 0 || len(rows[0]) != 3 || rows[0][0] != "day" || rows[0][1] != "template" || rows[0][2] != "seconds" {
		t.Fatalf("CSV header %v, want day,template,seconds", rows)
	}
	rows = rows[1:]
	if len(rows) != len(after.Usage) {
		t.Fatalf("CSV has %d rows %v, the API %d %+v", len(rows), rows, len(after.Usage), after.Usage)
	}
	for i, u := range after.Usage {
		want := []string{u.Day, u.Template, strconv.FormatInt(u.Seconds, 10)}
		if rows[i][0] != want[0] || rows[i][1] != want[1] || rows[i][2] != want[2] {
			t.Errorf("CSV row %d %v, API %v", i+1, rows[i], want)
		}
	}
	if name := eval[string](t, b, `document.querySelector('#usage a[download]').getAttribute('download')`); name != "envlease-usage-"+since+".csv" {
		t.Errorf("download name %q", name)
	}
}

func ptr[T any](v T) *T { return &v }
