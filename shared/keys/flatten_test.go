package keys_test

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// flatten renders every value of an item, nested ones too, as text.
func flatten(item map[string]types.AttributeValue) []string {
	var out []string
	for k, v := range item {
		out = append(out, k)
		out = append(out, flattenValue(v)...)
	}
	return out
}

func flattenValue(v types.AttributeValue) []string {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return []string{x.Value}
	case *types.AttributeValueMemberN:
		return []string{x.Value}
	case *types.AttributeValueMemberSS:
		return x.Value
	case *types.AttributeValueMemberM:
		return flatten(x.Value)
	case *types.AttributeValueMemberL:
		var out []string
		for _, e := range x.Value {
			out = append(out, flattenValue(e)...)
		}
		return out
	case *types.AttributeValueMemberB:
		return []string{string(x.Value)}
	default:
		return []string{fmt.Sprint(x)}
	}
}
