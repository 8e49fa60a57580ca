package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
)

// keptLogs stands in for the artifacts service and S3: it records the
// artifacts nodes ask for, takes their uploads, seals them when the bytes
// match, and serves them at signed links.
type keptLogs struct {
	mu    sync.Mutex
	n     int
	data  map[string][]byte
	arts  map[string]domain.Artifact
	srv   *httptest.Server
	now   func() time.Time
	store interface {
		PutArtifact(context.Context, domain.Artifact) error
		SealArtifact(context.Context, domain.Artifact) error
	}
}

func newKeptLogs(t *testing.T) *keptLogs {
	k := &keptLogs{data: map[string][]byte{}, arts: map[string]domain.Artifact{}}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/")
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			k.mu.Lock()
			k.data[id] = b
			k.mu.Unlock()
		case http.MethodGet:
			k.mu.Lock()
			b, ok := k.data[id]
			k.mu.Unlock()
			if !ok {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(b)
		}
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keptLogs) PartSize() int64 { return artifacts.DefaultPartSize }

func (k *keptLogs) Create(ctx context.Context, p domain.Principal, req artifacts.CreateRequest) (artifacts.Created, error) {
	k.mu.Lock()
	k.n++
	id := fmt.Sprintf("art_log%d", k.n)
	k.mu.Unlock()
	now := k.now()
	a := domain.Artifact{
		ID: id, Name: req.Name, Size: *req.Size, SHA256: req.SHA256, ContentType: req.ContentType, KeyVersion: 1,
		CreatedBy: p.Actor(), Created: now, Expires: now.Add(artifacts.DefaultExpiry), State: domain.ArtifactOpen,
		OrgID: p.OrgID, Key: "orgs/" + p.OrgID + "/artifacts/" + id + "/data", Labels: req.Labels, Chunks: 1, Segments: []domain.Segment{},
	}
	if err := k.store.PutArtifact(ctx, a); err != nil {
		return artifacts.Created{}, err
	}
	k.mu.Lock()
	k.arts[id] = a
	k.mu.Unlock()
	up := domain.Upload{Parts: []domain.UploadPart{{PartNumber: 1, Size: a.Size, SHA256: a.SHA256, Method: http.MethodPut, URL: k.srv.URL + "/" + id, Headers: map[string]string{}}}}
	return artifacts.Created{Artifact: a, Upload: up}, nil
}

func (k *keptLogs) Complete(ctx context.Context, _ domain.Principal, id string, _ []artifacts.CompletedPart) (domain.Artifact, error) {
	k.mu.Lock()
	a, b := k.arts[id], k.data[id]
	k.mu.Unlock()
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(b)) != a.Size {
		return domain.Artifact{}, domain.Invalid("sha256", "the upload does not match")
	}
	sealed := k.now()
	a.State, a.Sealed, a.SealedBytes = domain.ArtifactSealed, &sealed, a.Size
	a.Segments = []domain.Segment{{Name: "data", Size: a.Size, Objects: 1}}
	return a, k.store.SealArtifact(ctx, a)
}

func (k *keptLogs) LinkFor(_ context.Context, a domain.Artifact, ttl time.Duration) (domain.Link, error) {
	return domain.Link{URL: k.srv.URL + "/" + a.ID, Expires: k.now().Add(ttl)}, nil
}

// newLogStack is newStack whose nodes keep logs in k and whose environments
// link them.
func newLogStack(t *testing.T, k *keptLogs, templates ...domain.Template) *stack {
	t.Helper()
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc := nodes.NewService(e.Store, k, e.Clock, nodes.Options{HeartbeatInterval: 200 * time.Millisecond, PollMax: 20 * time.Millisecond})
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock, environments.WithTemplateTTL(0), environments.WithLinks(k)))}
	})
	k.store, k.now = e.Store, e.Clock.Now
	for _, tpl := range templates {
		tpl.Pools = []string{"local"}
		tpl.Timeouts = domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)}
		tpl.Quota = domain.Quota{MaxLeases: 5}
		if err := e.Store.PutTemplate(context.Background(), "acme", tpl); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(apitest.CheckedHandler(t, e.Handler))
	t.Cleanup(srv.Close)
	// The agent judges tickets by the real clock, the stack signs them by
	// its own: let them agree.
	e.Clock.Set(time.Now())
	return &stack{Env: e, url: srv.URL}
}

// logsOf asks the API where environment id's log is, as token.
func (s *stack) logsOf(t *testing.T, token, id string) (int, environments.Logs) {
	t.Helper()
	r := s.Do("GET", "/v1/environments/"+id+"/logs", token, nil)
	var out environments.Logs
	if r.Status == 200 {
		r.JSON(t, &out)
	}
	return r.Status, out
}

// readLive reads the node's live log with the answer's ticket.
func readLive(t *testing.T, l environments.Logs, query string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.Live.URL+"?env="+l.Environment+query, nil)
	req.Header.Set("Authorization", "Bearer "+l.Live.Ticket)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func getURL(t *testing.T, u string) string {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s", u, res.Status)
	}
	return string(b)
}

// A running environment's log is followed live on its node while its
// command prints (one API request, then the node alone), and read whole
// after its command failed, from the artifact its node kept; another
// organization's environment is 404.
func TestLogsFollowedThenKept(t *testing.T) {
	k := newKeptLogs(t)
	s := newLogStack(t, k, domain.Template{
		Name: "ticker", Runtime: "process",
		Command: []string{"sh", "-c", `i=0; while [ $i -lt 30 ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done; echo "giving up" >&2; exit 3`},
	})
	s.runAgent(t, time.Second)
	id := s.lease(t, "ticker")
	s.wait(t, id, domain.StateReady)

	if st, _ := s.logsOf(t, apitest.CarolToken, id); st != 404 {
		t.Fatalf("another organization's environment: %d", st)
	}
	st, live := s.logsOf(t, apitest.BobToken, id)
	if st != 200 || live.Live == nil || live.Kept != nil || !strings.HasSuffix(live.Live.URL, "/logs") {
		t.Fatalf("live logs: %d %+v", st, live)
	}
	// Followed until the command ends and its log with it.
	code, h, got := readLive(t, live, "&follow=true")
	if code != 200 || h.Get(agent.LogOffsetHeader) != "0" {
		t.Fatalf("follow: %d %v", code, h)
	}
	for _, want := range []string{"] claimed by node ", "] started", "tick 0\n", "tick 29\n", "giving up\n", "] failed: process exited with status 3\n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the followed log lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "tick 29") > strings.Index(got, "] failed: ") {
		t.Fatalf("out of order:\n%s", got)
	}

	failed := s.wait(t, id, domain.StateFailed)
	if !strings.HasPrefix(failed.Log, "art_log") {
		t.Fatalf("the failed environment links no log: %+v", failed)
	}
	st, kept := s.logsOf(t, apitest.BobToken, id)
	if st != 200 || kept.Kept == nil || kept.Live != nil || kept.Kept.Artifact != failed.Log || kept.Kept.URL == "" {
		t.Fatalf("kept logs: %d %+v", st, kept)
	}
	body := getURL(t, kept.Kept.URL)
	if int64(len(body)) != kept.Kept.Size || !strings.Contains(body, "tick 0\n") || !strings.Contains(body, "tick 29\n") || !strings.Contains(body, "giving up\n") || !strings.Contains(body, "exited with status 3") {
		t.Fatalf("kept log (%d bytes):\n%s", kept.Kept.Size, body)
	}
	if st, _ := s.logsOf(t, apitest.CarolToken, id); st != 404 {
		t.Fatalf("another organization's ended environment: %d", st)
	}
	// Its ticket no longer opens anything on the node.
	if code, _, _ := readLive(t, live, ""); code != 404 {
		t.Fatalf("the live log of an ended environment: %d", code)
	}
}

// A command that writes far more than the node keeps is never held up by
// its log: the environment stays ready, the node keeps only the last bytes,
// and the kept log says where it was cut. A ticket of another kind, or for
// another environment, opens no log.
func TestLogOverTheBoundIsCut(t *testing.T) {
	k := newKeptLogs(t)
	s := newLogStack(t, k, domain.Template{
		Name: "chatty", Runtime: "process",
		// About 4 MiB at once, then one line a moment until stopped.
		Command: []string{"sh", "-c", `head -c 4194304 /dev/zero | tr '\0' 'x' | fold -w 1023; echo; echo "past the flood"; while :; do echo alive; sleep 0.2; done`},
	})
	const bound = 64 << 10
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.LogMax = bound })
	id := s.lease(t, "chatty")
	s.wait(t, id, domain.StateReady)

	_, live := s.logsOf(t, apitest.BobToken, id)
	deadline := time.Now().Add(time.Minute)
	for {
		code, h, got := readLive(t, live, "")
		if code != 200 {
			t.Fatalf("live log: %d", code)
		}
		if strings.Contains(got, "alive\n") {
			if len(got) > bound || h.Get(agent.LogOffsetHeader) == "0" {
				t.Fatalf("the node keeps %d bytes from %s, bound %d", len(got), h.Get(agent.LogOffsetHeader), bound)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the environment printed nothing past its flood: %d bytes", len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if e := s.wait(t, id, domain.StateReady); e.State != domain.StateReady {
		t.Fatal("the flood stopped the environment")
	}
	// A tunnel ticket is not a log ticket.
	r := s.Do("POST", "/v1/environments/"+id+"/tunnel", apitest.BobToken, nil)
	if r.Status != 409 { // no exports: no tunnel ticket at all
		t.Fatalf("tunnel ticket: %d", r.Status)
	}
	forged := live
	forged.Environment = "env_other"
	if code, _, _ := readLive(t, forged, ""); code != 403 {
		t.Fatalf("a ticket for another environment: %d", code)
	}

	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	stopped := s.wait(t, id, domain.StateStopped)
	deadline = time.Now().Add(time.Minute)
	for stopped.Log == "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		stopped = s.wait(t, id, domain.StateStopped)
	}
	_, kept := s.logsOf(t, apitest.BobToken, id)
	if kept.Kept == nil {
		t.Fatalf("no kept log: %+v", kept)
	}
	body := getURL(t, kept.Kept.URL)
	first, _, _ := strings.Cut(body, "\n")
	if !strings.HasPrefix(first, "\x1e[envlease] the log was cut: its first ") || len(body) > bound+200 || !strings.Contains(body, "] stopped") {
		t.Fatalf("kept log of %d bytes begins %q, ends %q", len(body), first, body[max(0, len(body)-200):])
	}
}

// A container's output reaches its log as the process runtime's does, with
// the node's lines about its image and how it ended (out of memory).
func TestContainerLogKept(t *testing.T) {
	ref := busyboxRef(t)
	k := newKeptLogs(t)
	s := newLogStack(t, k,
		domain.Template{Name: "speaker", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref},
			Command: []string{"sh", "-c", "echo from the container; echo to its stderr >&2; sleep 1; exit 5"}},
		domain.Template{Name: "hog", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref},
			Command: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"}, Resources: domain.Resources{Memory: "16Mi"}},
	)
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })
	cases := []struct {
		template string
		want     []string
	}{
		{"speaker", []string{"] image ", "from the container\n", "to its stderr\n", "] failed: container process exit 5"}},
		{"hog", []string{"] failed: container process killed: out of memory"}},
	}
	for _, c := range cases {
		id := s.lease(t, c.template)
		e := s.waitLong(t, id, domain.StateFailed)
		deadline := time.Now().Add(time.Minute)
		for e.Log == "" && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			e = s.waitLong(t, id, domain.StateFailed)
		}
		_, kept := s.logsOf(t, apitest.BobToken, id)
		if kept.Kept == nil {
			t.Fatalf("%s: no kept log (%q)", c.template, e.Error)
		}
		body := getURL(t, kept.Kept.URL)
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the kept log lacks %q:\n%s", c.template, w, body)
			}
		}
	}
}
