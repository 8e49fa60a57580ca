package devstack

import (
	"context"
	"fmt"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// AllowBrowserOrigin lets pages served from origin (the web console) PUT and
// GET objects of bucket through presigned URLs: the browser asks object
// storage first (CORS preflight), and without a rule it refuses. The deployed
// bucket gets the same rule from infra.
func AllowBrowserOrigin(ctx context.Context, client *s3.Client, bucket, origin string) error {
	_, err := client.PutBucketCors(ctx, &s3.PutBucketCorsInput{
		Bucket: aws.String(bucket),
		CORSConfiguration: &types.CORSConfiguration{CORSRules: []types.CORSRule{{
			AllowedOrigins: []string{origin},
			AllowedMethods: []string{"GET", "PUT", "HEAD"},
			AllowedHeaders: []string{"*"},
			ExposeHeaders:  []string{"ETag"},
			MaxAgeSeconds:  aws.Int32(3600),
		}}},
	})
	if err != nil {
		return fmt.Errorf("devstack: allow %s in the CORS rules of bucket %s: %w", origin, bucket, err)
	}
	return nil
}

// Origin is scheme://host[:port] of a URL, as a browser compares origins.
func Origin(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
