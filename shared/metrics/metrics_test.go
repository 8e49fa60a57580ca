package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Each SDK call made with CountCalls is counted against the request in its
// context, per service, and a call outside a request is not counted.
func TestCountCalls(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), RetryMaxAttempts: 1}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint, o.UsePathStyle = aws.String(srv.URL), true
		o.APIOptions = append(o.APIOptions, CountCalls(S3))
	})
	sock := apigatewaymanagementapi.NewFromConfig(cfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(srv.URL)
		o.APIOptions = append(o.APIOptions, CountCalls(Socket))
	})
	ctx, r := WithRequest(context.Background())
	for range 2 {
		s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
	}
	sock.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String("c"), Data: []byte("x")})
	s3c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
	if r.S3Calls() != 2 || r.SocketCalls() != 1 || r.DynamoCalls() != 0 {
		t.Errorf("s3 %d socket %d dynamodb %d, want 2 1 0", r.S3Calls(), r.SocketCalls(), r.DynamoCalls())
	}
}
