package blob

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/domain"
)

// checkPrefix refuses prefixes that could reach beyond one artifact: the
// deletions below take whatever is listed under them.
func checkPrefix(prefix string) error {
	if !strings.HasPrefix(prefix, "orgs/") || !strings.HasSuffix(prefix, "/") || strings.Count(prefix, "/") < 4 {
		return domain.Internal(fmt.Errorf("blob: refusing to delete under prefix %q", prefix))
	}
	return nil
}

// DeletePrefix deletes every object under prefix (one artifact's folder,
// Prefix(org, id)) and returns how many it deleted. It lists rather than
// deleting the one known key, so segments and stray objects go too. Objects
// already gone are not an error, so concurrent or repeated runs are safe.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	if err := checkPrefix(prefix); err != nil {
		return 0, err
	}
	n := 0
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, mapError("list objects", err)
		}
		for _, o := range page.Contents {
			if err := s.Delete(ctx, aws.ToString(o.Key)); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// AbortUploads aborts every unfinished multipart upload under prefix and
// returns how many it aborted. A sealed artifact has none (sealing completes
// its upload), so this is a backstop; the bucket's lifecycle rule aborts
// incomplete uploads after a day as well.
func (s *Store) AbortUploads(ctx context.Context, prefix string) (int, error) {
	if err := checkPrefix(prefix); err != nil {
		return 0, err
	}
	n := 0
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)}
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return n, mapError("list multipart uploads", err)
		}
		for _, u := range out.Uploads {
			if err := s.AbortMultipart(ctx, aws.ToString(u.Key), aws.ToString(u.UploadId)); err != nil {
				return n, err
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) {
			return n, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
