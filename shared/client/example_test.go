package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/sharepack"
	"github.com/envlease/envlease/shared/tunnel"
)

// The examples read the API's URL and a token from ENVLEASE_URL and
// ENVLEASE_TOKEN, the variables the envlease command reads; under go test,
// TestMain sets them to a service it runs in the test process.

// A lease: create an environment from a template, wait until a node has
// started it, and delete it.
func Example() {
	// The context bounds the whole flow, the wait for ready included.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(os.Getenv("ENVLEASE_URL"), os.Getenv("ENVLEASE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	// With an Idempotency-Key a lease whose answer was lost is retried and
	// leases once.
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: "web", Idle: "15m", IdempotencyKey: rand.Text()})
	if err != nil {
		log.Fatal(err)
	}
	env := leased.Environment
	fmt.Println("leased:", env.State)

	// The lease answers at once; a node then claims and starts the
	// environment. WaitReady is answered as soon as it is ready (or can no
	// longer be), or after the wait asked for.
	for env.State != domain.StateReady {
		if !env.State.Live() {
			log.Fatalf("%s is %s: %s", env.ID, env.State, env.Error)
		}
		if env, err = c.WaitReady(ctx, env.ID, client.MaxWait); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("now:", env.State)

	env, err = c.DeleteEnvironment(ctx, env.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped because:", env.StopReason)
	// Output:
	// leased: pending
	// now: ready
	// stopped because: deleted
}

// What envlease run does: send a folder into the template's share, lease
// with this machine as the sandbox, wait until ready, forward the exports to
// this machine, use them while touching the environment, and delete it.
func Example_run() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(os.Getenv("ENVLEASE_URL"), os.Getenv("ENVLEASE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	// The sandbox is this machine: each export of a lease made with it gets
	// a listen address here. Its join key is redeemed at once.
	reg, err := c.RegisterSandbox(ctx, client.SandboxRegistration{Name: "ci-runner"})
	if err != nil {
		log.Fatal(err)
	}
	sandbox, err := c.JoinSandbox(ctx, reg.JoinKey)
	if err != nil {
		log.Fatal(err)
	}

	// A share's files travel as an artifact, a tar compressed with zstd.
	dir, err := os.MkdirTemp("", "site")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("hello from the share\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	files, err := sharepack.List(dir, nil, sharepack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var packed bytes.Buffer
	if err := sharepack.Write(&packed, files, nil); err != nil {
		log.Fatal(err)
	}
	share, err := c.Push(ctx, bytes.NewReader(packed.Bytes()), int64(packed.Len()),
		client.ArtifactCreate{Name: "share-src.tar.zst", ContentType: sharepack.ContentType, Expires: "7h"}, client.PushOptions{})
	if err != nil {
		log.Fatal(err)
	}

	leased, err := c.Lease(ctx, client.LeaseRequest{
		Template: "web", Sandbox: sandbox.ID, IdempotencyKey: rand.Text(),
		Shares: []client.ShareRequest{{Name: "src", Artifact: share.ID}},
	})
	if err != nil {
		log.Fatal(err)
	}
	env := leased.Environment
	for env.State != domain.StateReady {
		if !env.State.Live() {
			log.Fatalf("%s is %s: %s", env.ID, env.State, env.Error)
		}
		if env, err = c.WaitReady(ctx, env.ID, client.MaxWait); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("now:", env.State)

	// Forward carries connections to each export's listen address here
	// through a tunnel to the node, as envlease port-forward does.
	fctx, stop := context.WithCancel(ctx)
	up, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- tunnel.Forward(fctx, c, env.ID, func(e tunnel.Event) {
			if e.Kind == tunnel.Forwarding {
				close(up)
			}
		}, tunnel.Options{})
	}()
	select {
	case <-up:
	case err := <-done:
		log.Fatal(err)
	}
	res, err := http.Get("http://" + env.Exports[0].Listen + "/src/index.html")
	if err != nil {
		log.Fatal(err)
	}
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(page))

	// A touch moves the idle deadline; envlease run touches every third of
	// the idle timeout while its command runs.
	if env, err = c.TouchEnvironment(ctx, env.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("touched:", env.State)

	stop()
	<-done
	if env, err = c.DeleteEnvironment(ctx, env.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped because:", env.StopReason)
	// Output:
	// now: ready
	// hello from the share
	// touched: ready
	// stopped because: deleted
}

// Push a file as an artifact and sign a link that downloads it without a
// token until the link expires.
func ExampleClient_Push() {
	ctx := context.Background()
	c, err := client.New(os.Getenv("ENVLEASE_URL"), os.Getenv("ENVLEASE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	report := []byte("all 42 tests passed\n")
	// Push digests the bytes, uploads them to object storage (in parts
	// when large) and seals the artifact once the service checked them.
	art, err := c.Push(ctx, bytes.NewReader(report), int64(len(report)),
		client.ArtifactCreate{Name: "report.txt", ContentType: "text/plain", Expires: "24h"}, client.PushOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("artifact:", art.State)

	link, err := c.CreateLink(ctx, art.ID, "2h")
	if err != nil {
		log.Fatal(err)
	}
	res, err := http.Get(link.URL) // no token: the URL is signed
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(body))
	// Output:
	// artifact: sealed
	// all 42 tests passed
}

// An API error carries the HTTP status and the API's code, whatever
// wrapped it.
func ExampleCodeOf() {
	ctx := context.Background()
	c, err := client.New(os.Getenv("ENVLEASE_URL"), os.Getenv("ENVLEASE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.GetEnvironment(ctx, "env_nosuch")
	err = fmt.Errorf("checking the environment: %w", err)
	fmt.Println(client.StatusOf(err), client.CodeOf(err))
	// Output:
	// 404 not_found
}
