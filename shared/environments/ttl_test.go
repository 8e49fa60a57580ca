package environments_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// A stopped environment carries a ttl of stopped + EnvRecordKept; GET and the
// stopped listing keep answering until then and not after, whether or not
// DynamoDB TTL has deleted the item (the emulators never do). Live ones carry
// no ttl.
func TestStoppedRecordsAreKeptThenGone(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
	if _, ok := rawItem(t, e, "ORG#acme", "ENV#"+id)["ttl"]; ok {
		t.Fatal("a live environment carries a ttl")
	}
	e.Clock.Advance(time.Minute)
	if r := e.Do(http.MethodDelete, "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	stopped := e.Clock.Now()
	ttl, _ := rawItem(t, e, "ORG#acme", "ENV#"+id)["ttl"].(*types.AttributeValueMemberN)
	if want := fmt.Sprint(stopped.Add(domain.EnvRecordKept).Unix()); ttl == nil || ttl.Value != want {
		t.Fatalf("ttl %v, want %s", ttl, want)
	}
	listed := func() bool {
		r := e.Do(http.MethodGet, "/v1/environments?state=stopped", apitest.AliceToken, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("list: %d %s", r.Status, r.Body)
		}
		for _, x := range r.Map(t)["environments"].([]any) {
			if x.(map[string]any)["id"] == id {
				return true
			}
		}
		return false
	}
	e.Clock.Set(stopped.Add(domain.EnvRecordKept - time.Second))
	if r := e.Do(http.MethodGet, "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != http.StatusOK || !listed() {
		t.Fatalf("a second before the end of its keeping: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(time.Second)
	if r := e.Do(http.MethodGet, "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != http.StatusNotFound || listed() {
		t.Fatalf("past its keeping: %d %s", r.Status, r.Body)
	}
}
