package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

// backends are the table and bucket the local stack serves from.
type backends struct {
	dynamo                     *dynamodb.Client
	table                      string
	s3                         *s3.Client
	bucket                     string
	dynamoKind, dynamoEndpoint string
	s3Kind, s3Endpoint         string
	stop                       func()
}

// externalEndpoints reports whether the SDK's own endpoint settings name a
// DynamoDB and S3 to use (LocalStack, say) instead of the embedded ones.
func externalEndpoints() bool {
	return os.Getenv("AWS_ENDPOINT_URL") != "" ||
		(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" && os.Getenv("AWS_ENDPOINT_URL_S3") != "")
}

// startBackends starts a DynamoDB (minidyn in-process, or DynamoDB Local as a
// child process) and versitygw on loopback, or — when the environment sets
// AWS_ENDPOINT_URL — uses the endpoints the SDK is pointed at, creating the
// table (TABLE_NAME, default envlease) and the bucket (BUCKET_NAME, default
// envlease) there if they are missing.
func startBackends(ctx context.Context, o options) (backends, error) {
	if externalEndpoints() {
		return useEndpoints(ctx, o.progress)
	}
	dyn, stopDynamo, err := startDynamo(ctx, o)
	if err != nil {
		return backends{}, err
	}
	fmt.Fprintln(o.progress, "starting S3 (versitygw)…")
	dataDir := o.dataDir
	if dataDir != "" {
		if dataDir, err = filepath.Abs(dataDir); err == nil {
			err = os.MkdirAll(dataDir, 0o755)
		}
		if err != nil {
			stopDynamo()
			return backends{}, err
		}
	}
	s3s, err := devstack.StartS3(ctx, devstack.S3Options{Dir: dataDir, Bucket: "envlease", Progress: o.progress})
	if err != nil {
		stopDynamo()
		return backends{}, err
	}
	return backends{
		dynamo: dyn.Client(ctx), table: dyn.Table, s3: s3s.Client(ctx), bucket: s3s.Bucket,
		dynamoKind: dyn.Kind, dynamoEndpoint: dyn.Endpoint, s3Kind: "versitygw", s3Endpoint: s3s.Endpoint,
		stop: func() { s3s.Stop(); stopDynamo() },
	}, nil
}

// startDynamo starts the DynamoDB that -dynamo names, or hands back the one a
// test gave (which the test closes).
func startDynamo(ctx context.Context, o options) (*devstack.Dynamo, func(), error) {
	if o.testDynamo != nil {
		return o.testDynamo, func() {}, nil
	}
	switch o.dynamo {
	case "", "minidyn":
		fmt.Fprintln(o.progress, "starting DynamoDB (minidyn, in-process)…")
		d, err := devstack.StartDynamo(ctx, "envlease")
		if err != nil {
			return nil, nil, err
		}
		// As DynamoDB's TTL, which the deployed table has on, deletes
		// expired records: what a long session keeps stays bounded.
		d.ExpireItems(store.AttrTTL, time.Minute, time.Now)
		return d, d.Close, nil
	case "local":
		fmt.Fprintln(o.progress, "starting DynamoDB (DynamoDB Local, Java)…")
		l, err := devstack.StartDynamoLocal(ctx, devstack.DynamoLocalOptions{Progress: o.progress})
		if err != nil {
			return nil, nil, err
		}
		d, err := l.Namespace(ctx, "envlease")
		if err != nil {
			l.Stop()
			return nil, nil, err
		}
		return d, l.Stop, nil
	default:
		return nil, nil, fmt.Errorf("-dynamo %q: want minidyn or local", o.dynamo)
	}
}

func useEndpoints(ctx context.Context, progress io.Writer) (backends, error) {
	awsCfg, err := platform.AWSConfig(ctx)
	if err != nil {
		return backends{}, err
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	be := backends{
		dynamo: dynamodb.NewFromConfig(awsCfg), table: envOr("TABLE_NAME", "envlease"),
		// Buckets are addressed by path: endpoints other than AWS's (LocalStack,
		// a gateway on localhost) seldom have wildcard DNS for bucket names.
		s3:         s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.UsePathStyle = true }),
		bucket:     envOr("BUCKET_NAME", "envlease"),
		dynamoKind: "from AWS_ENDPOINT_URL*", dynamoEndpoint: endpointOf("DYNAMODB"),
		s3Kind: "from AWS_ENDPOINT_URL*", s3Endpoint: endpointOf("S3"),
		stop: func() {},
	}
	fmt.Fprintf(progress, "using DynamoDB at %s and S3 at %s…\n", be.dynamoEndpoint, be.s3Endpoint)
	if err := store.EnsureTable(ctx, be.dynamo, be.table); err != nil {
		return backends{}, err
	}
	if _, err := be.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(be.bucket)}); err != nil {
		_, cerr := be.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(be.bucket)})
		var owned *s3types.BucketAlreadyOwnedByYou
		if cerr != nil && !errors.As(cerr, &owned) {
			return backends{}, fmt.Errorf("create bucket %s: %w", be.bucket, cerr)
		}
	}
	return be, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func endpointOf(service string) string {
	if v := os.Getenv("AWS_ENDPOINT_URL_" + service); v != "" {
		return v
	}
	return os.Getenv("AWS_ENDPOINT_URL")
}
