package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Artifact items:
//
//	ORG#<org>  ARTIFACT#<id>   the artifact, in every state
//	  GSI1 ORG#<org>#ARTIFACTS / <created>#<id>          only while sealed: the listing, newest first
//	  GSI2 ARTEXP#<shard> / <due>#<org>#<id>                   until it is a tombstone: the expiry job's due index,
//	                                                     due = domain.Artifact.DueAt (sealed: expires;
//	                                                     open, failed: uploadUntil + ArtifactUploadGrace)
//	  ttl  expires + ArtifactTombstone (epoch seconds)
//
// The listing key is written at seal time, so open and failed uploads never
// appear in the listing. They are in the due index from the start, though:
// an upload that is abandoned, or written to again after it failed, holds
// bytes that nothing else would remove. Renewing the upload moves its entry
// (RenewArtifactUpload); sealing moves it to the expiry. The expiry job
// removes the entry when it turns the item into a tombstone.

// ArtifactTombstone is how long an artifact's item outlives its expiry, so a
// link request for it answers 410 rather than 404. DynamoDB TTL deletes it
// some time after that.
const ArtifactTombstone = 30 * 24 * time.Hour

// ArtifactDuePK is the base of the GSI2 partitions of artifacts by due time
// (ArtifactDuePK#<shard>).
const ArtifactDuePK = "ARTEXP"

// sortTime is the fixed-width UTC form used in sort keys, so string order is
// time order.
const sortTime = "2006-01-02T15:04:05.000000000Z"

func artifactSK(id string) string       { return "ARTIFACT#" + id }
func artifactsGSI1PK(org string) string { return "ORG#" + org + "#ARTIFACTS" }
func artifactGSI1SK(a domain.Artifact) string {
	return a.Created.UTC().Format(sortTime) + "#" + a.ID
}

// ArtifactDueSK is the GSI2 sort key of an artifact due at due (its expiry
// once sealed): a range query on ArtifactDuePK with GSI2SK < now's sortTime
// form finds the due ones.
func ArtifactDueSK(due time.Time, org, id string) string {
	return due.UTC().Format(sortTime) + "#" + org + "#" + id
}

// ArtifactDuePartition is the GSI2 partition of artifact id of org.
func (s *Store) ArtifactDuePartition(org, id string) string {
	return shardPK(ArtifactDuePK, s.shardOf(org, id))
}

// DueSortKey renders t as the prefix of due-index sort keys.
func DueSortKey(t time.Time) string { return t.UTC().Format(sortTime) }

type segmentItem struct {
	Name    string `dynamodbav:"name"`
	Size    int64  `dynamodbav:"size"`
	Objects int    `dynamodbav:"objects"`
}

type artifactItem struct {
	PK          string            `dynamodbav:"PK"`
	SK          string            `dynamodbav:"SK"`
	GSI1PK      string            `dynamodbav:"GSI1PK,omitempty"`
	GSI1SK      string            `dynamodbav:"GSI1SK,omitempty"`
	GSI2PK      string            `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK      string            `dynamodbav:"GSI2SK,omitempty"`
	TTL         int64             `dynamodbav:"ttl"`
	ID          string            `dynamodbav:"id"`
	Org         string            `dynamodbav:"org"`
	Project     string            `dynamodbav:"project"`
	Name        string            `dynamodbav:"name"`
	Size        int64             `dynamodbav:"size"`
	SHA256      string            `dynamodbav:"sha256"`
	ContentType string            `dynamodbav:"contentType"`
	Labels      map[string]string `dynamodbav:"labels,omitempty"`
	KeyVersion  int               `dynamodbav:"keyVersion"`
	Manifest    string            `dynamodbav:"manifest"`
	Segments    []segmentItem     `dynamodbav:"segments,omitempty"`
	Chunks      int               `dynamodbav:"chunks"`
	SealedBytes int64             `dynamodbav:"sealedBytes"`
	CreatedBy   string            `dynamodbav:"createdBy"`
	Created     time.Time         `dynamodbav:"created"`
	Expires     time.Time         `dynamodbav:"expires"`
	State       string            `dynamodbav:"state"`
	Sealed      *time.Time        `dynamodbav:"sealed,omitempty"`
	Key         string            `dynamodbav:"objectKey"`
	UploadID    string            `dynamodbav:"uploadId,omitempty"`
	PartSize    int64             `dynamodbav:"partSize,omitempty"`
	PartSHA256  []string          `dynamodbav:"partSha256,omitempty"`
	// UploadUntil is in sortTime form, not the encoder's RFC 3339 (which
	// drops trailing zeros), so condition expressions can compare it as a
	// string: a renewal never moves it back, and the expiry job fails an
	// open artifact only if no renewal moved it since its read.
	UploadUntil string `dynamodbav:"uploadUntil,omitempty"`
}

func tombstoneTTL(expires time.Time) int64 { return expires.Add(ArtifactTombstone).Unix() }

func (s *Store) newArtifactItem(a domain.Artifact) artifactItem {
	it := artifactItem{
		PK: orgPK(a.OrgID), SK: artifactSK(a.ID), TTL: tombstoneTTL(a.Expires),
		ID: a.ID, Org: a.OrgID, Project: a.Project, Name: a.Name, Size: a.Size, SHA256: a.SHA256,
		ContentType: a.ContentType, Labels: a.Labels, KeyVersion: a.KeyVersion, Manifest: a.Manifest,
		Chunks: a.Chunks, SealedBytes: a.SealedBytes, CreatedBy: a.CreatedBy, Created: a.Created.UTC(),
		Expires: a.Expires.UTC(), State: a.State, Sealed: utcPtr(a.Sealed), Key: a.Key, UploadID: a.UploadID,
		PartSize: a.PartSize, PartSHA256: a.PartSHA256,
	}
	if !a.UploadUntil.IsZero() {
		it.UploadUntil = a.UploadUntil.UTC().Format(sortTime)
	}
	for _, s := range a.Segments {
		it.Segments = append(it.Segments, segmentItem(s))
	}
	// An empty map is left out rather than stored as an empty M: minidyn
	// v0.8.2 reads an empty M back as the number 0.
	if len(a.Labels) == 0 {
		it.Labels = nil
	}
	if a.State == domain.ArtifactSealed {
		it.GSI1PK, it.GSI1SK = artifactsGSI1PK(a.OrgID), artifactGSI1SK(a)
	}
	if due, ok := a.DueAt(); ok {
		it.GSI2PK, it.GSI2SK = s.ArtifactDuePartition(a.OrgID, a.ID), ArtifactDueSK(due, a.OrgID, a.ID)
	}
	return it
}

func (it artifactItem) domain() (domain.Artifact, error) {
	a := domain.Artifact{
		ID: it.ID, Project: it.Project, Name: it.Name, Size: it.Size, SHA256: it.SHA256,
		ContentType: it.ContentType, Labels: it.Labels, KeyVersion: it.KeyVersion, Manifest: it.Manifest,
		Segments: []domain.Segment{}, Chunks: it.Chunks, SealedBytes: it.SealedBytes, CreatedBy: it.CreatedBy,
		Created: it.Created.UTC(), Expires: it.Expires.UTC(), State: it.State, Sealed: utcPtr(it.Sealed),
		OrgID: it.Org, Key: it.Key, UploadID: it.UploadID, PartSize: it.PartSize, PartSHA256: it.PartSHA256,
	}
	if a.Labels == nil {
		a.Labels = map[string]string{}
	}
	if it.UploadUntil != "" {
		t, err := time.Parse(sortTime, it.UploadUntil)
		if err != nil {
			return domain.Artifact{}, domain.Internal(fmt.Errorf("artifact %s/%s: uploadUntil %q: %w", it.Org, it.ID, it.UploadUntil, err))
		}
		a.UploadUntil = t.UTC()
	}
	for _, s := range it.Segments {
		a.Segments = append(a.Segments, domain.Segment(s))
	}
	return a, nil
}

// PutArtifact stores a new (open) artifact. An existing id is refused.
func (s *Store) PutArtifact(ctx context.Context, a domain.Artifact) error {
	return s.putNew(ctx, "put artifact", s.newArtifactItem(a), "an artifact with this id already exists")
}

// GetArtifact reads one artifact of org, in whatever state it is: one
// strongly consistent GetItem, so a link asked for right after sealing sees
// the seal. Another organization's id is simply not found. Callers check
// expiry themselves (domain.Artifact.ExpiredAt / UsableAt).
func (s *Store) GetArtifact(ctx context.Context, org, id string) (domain.Artifact, error) {
	if org == "" || !idOK(id) {
		return domain.Artifact{}, domain.NotFound("artifact")
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            key(orgPK(org), artifactSK(id)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return domain.Artifact{}, dependencyError("get artifact", err)
	}
	if out.Item == nil {
		return domain.Artifact{}, domain.NotFound("artifact")
	}
	var it artifactItem
	if err := unmarshal(out.Item, &it); err != nil {
		return domain.Artifact{}, err
	}
	return it.domain()
}

// SealArtifact writes the verified record of an open artifact, puts it in the
// listing and moves its due-index entry to its expiry. It succeeds once: an
// artifact that is no longer open (sealed by a concurrent call, failed,
// expired) is a conflict. The state condition is what keeps a seal from
// racing the expiry job: the job fails an open artifact (AbandonArtifact)
// before it deletes a byte, so a seal either lands first, and the job then
// finds a sealed artifact that is not due, or is refused.
func (s *Store) SealArtifact(ctx context.Context, a domain.Artifact) error {
	a.State = domain.ArtifactSealed
	a.UploadID = ""
	item, err := marshal(s.newArtifactItem(a))
	if err != nil {
		return err
	}
	reasons, err := s.transactWithEvent(ctx, "seal artifact", types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(s.table),
		Item:                      item,
		ConditionExpression:       aws.String("#state = :open"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":open": str(domain.ArtifactOpen)},
	}}, artifactEvent(ctx, domain.EventArtSealed, a, a.Sealed))
	if err != nil {
		return err
	}
	if reasons != nil {
		return domain.Errorf(domain.CodeConflict, "the artifact is no longer open: it was sealed, failed or expired meanwhile")
	}
	return nil
}

// FailArtifact marks an open artifact whose bytes did not verify; a is the
// record as read. The due-index entry stays where the latest renewal put it,
// the end of the upload window whose requests may still write bytes; a record
// written before open artifacts were indexed gets one (a's DueAt as failed).
func (s *Store) FailArtifact(ctx context.Context, a domain.Artifact) error {
	a.State = domain.ArtifactFailed
	due, _ := a.DueAt()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table),
		Key:       key(orgPK(a.OrgID), artifactSK(a.ID)),
		UpdateExpression: aws.String("SET #state = :failed, GSI2PK = if_not_exists(GSI2PK, :duepk), " +
			"GSI2SK = if_not_exists(GSI2SK, :duesk) REMOVE uploadId"),
		ConditionExpression:      aws.String("#state = :open"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":open": str(domain.ArtifactOpen), ":failed": str(domain.ArtifactFailed),
			":duepk": str(s.ArtifactDuePartition(a.OrgID, a.ID)), ":duesk": str(ArtifactDueSK(due, a.OrgID, a.ID)),
		},
	})
	if IsConditionFailed(err) {
		return domain.Errorf(domain.CodeConflict, "the artifact is no longer open")
	}
	return dependencyError("fail artifact", err)
}

// RenewArtifactUpload records that an open artifact's upload requests now
// work until until, and moves its due-index entry there: one conditional
// UpdateItem, no rewrite (only SET, nothing leaves an index). The recorded
// end never moves back, so it covers every request handed out; a renewal that
// lost a race to a later one is a conflict like one that found the artifact
// no longer open, and the caller tells them apart by reading the record.
func (s *Store) RenewArtifactUpload(ctx context.Context, a domain.Artifact, until time.Time) error {
	a.UploadUntil = until
	due, _ := a.DueAt()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(a.OrgID), artifactSK(a.ID)),
		UpdateExpression:         aws.String("SET uploadUntil = :until, GSI2PK = :duepk, GSI2SK = :duesk"),
		ConditionExpression:      aws.String("#state = :open AND (attribute_not_exists(uploadUntil) OR uploadUntil <= :until)"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":open": str(domain.ArtifactOpen), ":until": str(until.UTC().Format(sortTime)),
			":duepk": str(s.ArtifactDuePartition(a.OrgID, a.ID)), ":duesk": str(ArtifactDueSK(due, a.OrgID, a.ID)),
		},
	})
	if IsConditionFailed(err) {
		return domain.Errorf(domain.CodeConflict, "the artifact is no longer open, or its upload was renewed concurrently")
	}
	return dependencyError("renew artifact upload", err)
}

// AbandonArtifact fails an open artifact whose upload window ended without a
// complete, for the expiry job, before it deletes anything: from then on no
// complete can seal it and no renewal reopen it. uploadUntil is the window end
// the job read (zero: none recorded); a renewal since then moved it, and the
// write is refused. The due-index entry stays, so a job that dies before the
// tombstone leaves it for the next run.
func (s *Store) AbandonArtifact(ctx context.Context, org, id string, uploadUntil time.Time) error {
	cond := "#state = :open AND attribute_not_exists(uploadUntil)"
	vals := map[string]types.AttributeValue{":open": str(domain.ArtifactOpen), ":failed": str(domain.ArtifactFailed)}
	if !uploadUntil.IsZero() {
		cond = "#state = :open AND uploadUntil = :until"
		vals[":until"] = str(uploadUntil.UTC().Format(sortTime))
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(orgPK(org), artifactSK(id)),
		UpdateExpression:          aws.String("SET #state = :failed"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: vals,
	})
	if IsConditionFailed(err) {
		return domain.Errorf(domain.CodeConflict, "the artifact changed since it was read")
	}
	return dependencyError("abandon artifact", err)
}

// ExpireArtifact turns an artifact into a tombstone: state expired, out of the
// listing and the due index, kept until now + ArtifactTombstone so requests
// for it still answer 410. It is for the expiry job, after the objects are gone.
//
// It rewrites the item (read, then a put conditioned on the state read)
// rather than using UPDATE ... REMOVE, which minidyn v0.8.2 did not apply in
// a combined SET/REMOVE update in this project's tests.
func (s *Store) ExpireArtifact(ctx context.Context, org, id string, now time.Time) error {
	a, err := s.GetArtifact(ctx, org, id)
	if err != nil {
		return err
	}
	prev := a.State
	a.State = domain.ArtifactExpired
	a.UploadID = ""
	it := s.newArtifactItem(a) // a tombstone: no index keys
	it.TTL = now.Add(ArtifactTombstone).Unix()
	item, err := marshal(it)
	if err != nil {
		return err
	}
	reasons, err := s.transactWithEvent(ctx, "expire artifact", types.TransactWriteItem{Put: &types.Put{
		TableName:                 aws.String(s.table),
		Item:                      item,
		ConditionExpression:       aws.String("#state = :prev"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":prev": str(prev)},
	}}, artifactExpiredEvent(ctx, a, prev, now))
	if err != nil {
		return err
	}
	if reasons != nil {
		return domain.Errorf(domain.CodeConflict, "the artifact changed while it was being expired; retry")
	}
	return nil
}

func encodeArtifactCursor(a domain.Artifact) string {
	return encodeSortCursor(artifactsGSI1PK(a.OrgID), artifactGSI1SK(a), a.ID)
}

func decodeArtifactCursor(org, s string) (map[string]types.AttributeValue, error) {
	bad := domain.BadRequest("cursor", "cursor is not a `next` value of this listing")
	c, ok := decodeSortCursor(s, artifactsGSI1PK(org), sortTime)
	if !ok {
		return nil, bad
	}
	return map[string]types.AttributeValue{
		AttrPK: str(orgPK(org)), AttrSK: str(artifactSK(c.ID)),
		AttrGSI1PK: str(artifactsGSI1PK(org)), AttrGSI1SK: str(c.SK),
	}, nil
}

// ListArtifacts returns up to limit sealed artifacts of org that are unexpired
// at now, newest first, and the cursor of the next page ("" at the end).
// Expired artifacts still in the index (the expiry job has not run yet) are
// skipped here, so the page is filled from further items.
func (s *Store) ListArtifacts(ctx context.Context, org string, now time.Time, limit int, cursor string) ([]domain.Artifact, string, error) {
	var start map[string]types.AttributeValue
	if cursor != "" {
		var err error
		if start, err = decodeArtifactCursor(org, cursor); err != nil {
			return nil, "", err
		}
	}
	out := []domain.Artifact{}
	for {
		page, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.table),
			IndexName:                 aws.String(IndexGSI1),
			KeyConditionExpression:    aws.String("GSI1PK = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(artifactsGSI1PK(org))},
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(int32(limit + 1)),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, "", dependencyError("list artifacts", err)
		}
		// GSI1 projects keys (and state): the listed records are the base items.
		items, err := s.fetchItems(ctx, "list artifacts", page.Items)
		if err != nil {
			return nil, "", err
		}
		for _, raw := range items {
			var it artifactItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, "", err
			}
			a, err := it.domain()
			if err != nil {
				return nil, "", err
			}
			if !a.UsableAt(now) {
				continue
			}
			if len(out) == limit {
				// One more usable item exists: the page ends at the last one returned.
				return out, encodeArtifactCursor(out[len(out)-1]), nil
			}
			out = append(out, a)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, "", nil
		}
		start = page.LastEvaluatedKey
	}
}
