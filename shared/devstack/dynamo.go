// Package devstack starts the two local dependencies of envlease on loopback:
// DynamoDB (minidyn, in-process) and S3 (versitygw, a child process built from
// the version pinned in go.mod). The local dev server and the tests both use
// it, so every part of the system talks to real protocols through the real AWS
// SDK clients, with no in-memory twin of the store.
//
// Nothing started here listens on anything but 127.0.0.1.
package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
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

// Dynamo is a minidyn DynamoDB server listening on 127.0.0.1.
type Dynamo struct {
	// Endpoint is the base URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	// Table is the first table created at start.
	Table string
	// Server is the minidyn handler, exposed so tests can inject failures
	// (EmulateFailure, EmulateFailureForTable) or clear tables.
	Server *server.Server

	httpServer *http.Server
	serveDone  chan struct{}
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
		Endpoint:  "http://" + ln.Addr().String(),
		Table:     tables[0],
		Server:    server.NewServer(),
		serveDone: make(chan struct{}),
	}
	// ReadHeaderTimeout keeps a stuck client from pinning a goroutine
	// forever; nothing else needs tuning on loopback.
	d.httpServer = &http.Server{Handler: d.Server, ReadHeaderTimeout: 10 * time.Second}
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
// point it elsewhere. Building it does no I/O; ctx is accepted so callers
// treat it like any other client constructor.
func (d *Dynamo) Client(ctx context.Context) *dynamodb.Client {
	_ = ctx
	return dynamodb.NewFromConfig(localConfig("local", "local"), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(d.Endpoint)
	})
}

// Close stops the server and drops every table. It is safe to call more than
// once.
func (d *Dynamo) Close() {
	if d == nil || d.httpServer == nil {
		return
	}
	// Close only fails when closing the listener fails; there is nothing left
	// to release then, so the error carries no action for the caller.
	_ = d.httpServer.Close()
	<-d.serveDone
}

// localConfig is the aws.Config shared by the local clients: static
// credentials, the fixed region, and nothing read from the host.
func localConfig(accessKey, secretKey string) aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
	}
}
