package blob

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/metrics"
)

// Why links need their own signer: a presigned URL is valid only while the
// credentials that signed it are. A Lambda role's session credentials last a
// few hours, so a 7-day link signed with them stops working with the session.
// A deployment therefore signs links with a dedicated IAM user's long-term
// access key (whose only permission is s3:GetObject on the service's objects),
// kept in Secrets Manager as {"accessKeyId","secretAccessKey"}.

// FetchSecret returns a secret's string value.
type FetchSecret func(ctx context.Context, arn string) (string, error)

// SecretsManagerFetch reads secrets with a Secrets Manager client.
func SecretsManagerFetch(client *secretsmanager.Client) FetchSecret {
	return func(ctx context.Context, arn string) (string, error) {
		out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.SecretString), nil
	}
}

// SignerConfig says which identity signs download links.
type SignerConfig struct {
	// SecretARN names the secret holding the signing key. Empty means the
	// process's own credentials sign (links then live only as long as they).
	SecretARN string
	// Fetch reads the secret; required when SecretARN is set.
	Fetch FetchSecret
}

// LinkCredentials returns the credentials provider for Options.LinkCredentials:
// nil (the process's own) without a secret, else one that loads the secret
// once and keeps it for the life of the process.
func (c SignerConfig) LinkCredentials() aws.CredentialsProvider {
	if c.SecretARN == "" {
		return nil
	}
	return &secretCredentials{arn: c.SecretARN, fetch: c.Fetch}
}

// secretCredentials are static credentials read from a secret on first use.
// A failed read is not cached, so the next request tries again; a good one is
// kept, which makes every later link pure local signing.
type secretCredentials struct {
	arn   string
	fetch FetchSecret

	mu    sync.Mutex
	creds *aws.Credentials
}

type signerSecret struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
}

// Retrieve implements aws.CredentialsProvider.
func (s *secretCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creds != nil {
		return *s.creds, nil
	}
	if s.fetch == nil {
		return aws.Credentials{}, fmt.Errorf("link signer: no way to read secret %s", s.arn)
	}
	raw, err := s.fetch(ctx, s.arn)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("link signer: read secret: %w", err)
	}
	var v signerSecret
	if err := json.Unmarshal([]byte(raw), &v); err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		// Never include raw: it is the secret.
		return aws.Credentials{}, fmt.Errorf("link signer: secret %s is not {\"accessKeyId\",\"secretAccessKey\"}", s.arn)
	}
	s.creds = &aws.Credentials{AccessKeyID: v.AccessKeyID, SecretAccessKey: v.SecretAccessKey, Source: "LinkSignerSecret"}
	return *s.creds, nil
}

// FromConfig builds the Store a function uses: an S3 client from the SDK
// configuration and, when signerSecretARN is set, download links signed with
// the key kept in that secret (read on the first link, then cached).
func FromConfig(awsCfg aws.Config, bucket, signerSecretARN string, clk clock.Clock) *Store {
	signer := SignerConfig{SecretARN: signerSecretARN}
	if signerSecretARN != "" {
		signer.Fetch = SecretsManagerFetch(secretsmanager.NewFromConfig(awsCfg))
	}
	return New(Options{
		Client: s3.NewFromConfig(awsCfg, func(o *s3.Options) {
			o.APIOptions = append(o.APIOptions, metrics.CountCalls(metrics.S3))
		}), Bucket: bucket, Clock: clk,
		LinkCredentials: signer.LinkCredentials(),
	})
}
