package devstack

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"
)

// The embedded DynamoDB runs in the same process as its clients, so a client
// of it (Dynamo.Client) hands each request to the front's handler directly:
// the same DynamoDB JSON requests and answers, through the same SDK client
// and its middleware, without a loopback socket, SigV4 signing or the
// response checksum. Those cost a third of what a call cost the process and
// check nothing here: minidyn ignores signatures, and the checksum guards
// against a network that is not there. Programs outside the process (the
// CLI, a second dev server, a test's own SDK client built from Endpoint)
// still reach the same front through the loopback listener, signed and
// checksummed as on DynamoDB.

// inProcessClient is an aws.HTTPClient that serves each request on a
// handler in this process.
type inProcessClient struct{ h http.Handler }

func (c inProcessClient) Do(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	// A server sees a request without the client's GetBody and with its
	// URI as sent; the front and minidyn read only the body and headers.
	r.RequestURI = r.URL.RequestURI()
	rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	c.h.ServeHTTP(rec, r)
	rec.header.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	return &http.Response{
		Status:        strconv.Itoa(rec.status) + " " + http.StatusText(rec.status),
		StatusCode:    rec.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()),
		Request:       r,
	}, nil
}

// inProcessDynamoClient is a DynamoDB client of the embedded front:
// anonymous (nothing signed, no payload hash) and without the response
// checksum, which the in-process answers do not carry. It answers the plain
// reads typed, without JSON (inprocessread.go).
func inProcessDynamoClient(f *minidynFront, endpoint string) *dynamodb.Client {
	cfg := aws.Config{
		Region:      Region,
		Credentials: aws.AnonymousCredentials{},
		HTTPClient:  inProcessClient{f},
		// The standard retries, without the client-side retry quota (a
		// token bucket taken and given back on every attempt), which
		// protects a remote service from a client's retry storms.
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.RateLimiter = ratelimit.None })
		},
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.EndpointResolverV2 = fixedEndpoint{}
		o.DisableValidateResponseChecksum = true
		o.APIOptions = append(o.APIOptions, addTypedReads(f), func(s *middleware.Stack) error {
			// What a request to a remote service carries for that service
			// or for the network: the payload's SHA-256 (for the signature
			// alone), an invocation id (a read of the system's random
			// source per call), the user agent, the X-Ray trace header and
			// the clock skew read from the answer's Date. None of it means
			// anything to a handler in this process.
			for _, remove := range []func() error{
				func() error { _, err := s.Finalize.Remove((&v4.ComputePayloadSHA256{}).ID()); return err },
				func() error { _, err := s.Build.Remove((&awsmiddleware.ClientRequestID{}).ID()); return err },
				func() error { _, err := s.Build.Remove("UserAgent"); return err },
				func() error { _, err := s.Build.Remove((&awsmiddleware.RecursionDetection{}).ID()); return err },
				func() error { _, err := s.Deserialize.Remove((&awsmiddleware.RecordResponseTiming{}).ID()); return err },
			} {
				if err := remove(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// fixedEndpoint resolves every request to the front's own endpoint; the
// default resolver evaluates DynamoDB's endpoint rules on every call to
// reach the same answer from BaseEndpoint.
type fixedEndpoint struct{}

func (fixedEndpoint) ResolveEndpoint(_ context.Context, p dynamodb.EndpointParameters) (smithyendpoints.Endpoint, error) {
	u, err := url.Parse(aws.ToString(p.Endpoint))
	if err != nil {
		return smithyendpoints.Endpoint{}, err
	}
	return smithyendpoints.Endpoint{URI: *u}, nil
}
