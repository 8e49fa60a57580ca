// Package devstack starts the two local dependencies of envlease on loopback:
// DynamoDB (minidyn, in-process) and S3 (versitygw, a child process built from
// the version pinned in go.mod). The local dev server and the tests both use
// it, so every part of the system talks to real protocols through the real AWS
// SDK clients, with no in-memory twin of the store.
//
// Nothing started here listens on anything but 127.0.0.1.
package devstack

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/truora/minidyn/server"

	"github.com/envlease/envlease/shared/store"
)

// DefaultTable is the table StartDynamo creates when it is given no names.
const DefaultTable = "envlease"

// Region is the region every local client is configured with. Neither
// emulator cares, but SigV4 needs one and presigned URLs embed it.
const Region = "us-east-1"

// The two local DynamoDBs. minidyn runs in-process and starts at once;
// DynamoDB Local is Amazon's own emulator (a JVM), slower to start but strict
// where minidyn is lenient (item size, expression validation, REMOVE, ...).
const (
	KindMinidyn     = "minidyn"
	KindDynamoLocal = "dynamodb-local"
)

// Dynamo is a local DynamoDB with its tables: a minidyn server listening on
// 127.0.0.1, or a namespace of a DynamoDB Local process.
type Dynamo struct {
	// Kind is KindMinidyn or KindDynamoLocal.
	Kind string
	// Endpoint is the base URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	// Table is the first table created at start.
	Table string
	// Server is the minidyn handler, exposed so tests can inject failures
	// (EmulateFailure, EmulateFailureForTable). It holds only the items of
	// the request being served (see minidynFront), so clearing its tables
	// clears nothing. It is nil for DynamoDB Local.
	Server *Minidyn

	// AccessKey is the access key id the client signs with. DynamoDB Local
	// keeps a separate set of tables per access key, so a client of another
	// program (one configured through AWS_ACCESS_KEY_ID) must use this one
	// to see these tables; minidyn ignores it. The secret is "local".
	AccessKey string

	httpServer *http.Server
	serveDone  chan struct{}
	front      *minidynFront
	// stopped ends the TTL sweep (ExpireItems) at Close.
	stopped   chan struct{}
	closeFn   func()
	closeOnce sync.Once
}

// StartDynamo starts minidyn on a free loopback port and creates each named
// table with store.EnsureTable (DefaultTable when none is named). It is a
// plain net/http server rather than an httptest one so the dev server can use
// it outside tests.
func StartDynamo(ctx context.Context, tables ...string) (*Dynamo, error) {
	if len(tables) == 0 {
		tables = []string{DefaultTable}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("devstack: listen for dynamodb: %w", err)
	}
	d := &Dynamo{
		Kind:      KindMinidyn,
		AccessKey: "local",
		Endpoint:  "http://" + ln.Addr().String(),
		Table:     tables[0],
		serveDone: make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	// ReadHeaderTimeout keeps a stuck client from pinning a goroutine
	// forever; nothing else needs tuning on loopback.
	// The front keeps the items in key order and gives minidyn only those a
	// request needs, so the stack's speed does not follow the table's size.
	scratch := server.NewServer()
	typed, err := minidynTables(scratch)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	d.front = newMinidynFront(scratch, scratch.ClearAllTables, typed)
	d.Server = &Minidyn{Server: scratch, front: d.front}
	d.httpServer = &http.Server{Handler: withCRC32(d.front), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(d.serveDone)
		// Serve returns ErrServerClosed on Close; any other error means the
		// listener broke, which callers will see as failing requests.
		_ = d.httpServer.Serve(ln)
	}()

	client := d.Client(ctx)
	for _, name := range tables {
		if err := store.EnsureTable(ctx, client, name); err != nil {
			d.Close()
			return nil, fmt.Errorf("devstack: create table %q on minidyn: %w", name, err)
		}
	}
	return d, nil
}

// Client returns a DynamoDB client for this server. It is built from a fixed
// aws.Config rather than config.LoadDefaultConfig so that nothing in the
// developer's environment (profiles, AWS_REGION, AWS_ENDPOINT_URL_*) can
// point it elsewhere. A client of the embedded minidyn serves its requests
// in this process (inprocess.go) and answers the plain reads typed
// (inprocessread.go); one of DynamoDB Local goes over loopback. Building it
// does no I/O; ctx is accepted so callers treat it like any other client
// constructor.
func (d *Dynamo) Client(ctx context.Context) *dynamodb.Client {
	_ = ctx
	if d.front != nil {
		// The embedded DynamoDB is served in this process (inprocess.go).
		return inProcessDynamoClient(d.front, d.Endpoint)
	}
	return dynamodb.NewFromConfig(localConfig(d.AccessKey, "local"), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(d.Endpoint)
	})
}

// Close stops the minidyn server, or deletes the namespace's tables on
// DynamoDB Local. It is safe to call more than once.
func (d *Dynamo) Close() {
	if d == nil {
		return
	}
	d.closeOnce.Do(func() {
		if d.stopped != nil {
			close(d.stopped)
		}
		if d.closeFn != nil {
			d.closeFn()
		}
		if d.httpServer != nil {
			// Close only fails when closing the listener fails; there is
			// nothing left to release then.
			_ = d.httpServer.Close()
			<-d.serveDone
		}
	})
}

// ExpireItems deletes, every interval until Close, the items whose attribute
// attr (epoch seconds, a Number) has passed, as DynamoDB's TTL does on a
// table with TTL on attr (minidyn has no TTL of its own). Like DynamoDB's, it
// is late by up to an interval, so readers still compare attr to now. It
// bounds what a long-running dev server keeps. now is the clock it judges
// by. It does nothing on DynamoDB Local, whose tables live for a test process.
func (d *Dynamo) ExpireItems(attr string, interval time.Duration, now func() time.Time) {
	if d.front == nil {
		return
	}
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-d.stopped:
				return
			case <-tick.C:
				d.front.expire(attr, now())
			}
		}
	}()
}

// localConfig is the aws.Config shared by the local clients: static
// credentials, the fixed region, and nothing read from the host.
func localConfig(accessKey, secretKey string) aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
	}
}

// withCRC32 adds the X-Amz-Crc32 header that DynamoDB puts on every response
// and minidyn leaves out. The SDK checks every response body against it, and
// without it each body closes with "response did not match expected checksum"
// (logged as a warning by any client with a logger, as the Lambdas' are).
func withCRC32(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(rec.body.Bytes())), 10))
		w.Header().Set("Content-Length", strconv.Itoa(rec.body.Len()))
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// bufferedResponse holds a whole response so its checksum can go before it.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
