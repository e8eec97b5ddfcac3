package config

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// decimal is a shortcut for yaml.Node.Decode: where it gives a value, the
// value must be Decode's.
func TestDecimalMatchesYAML(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "-1", "007", "0x1F", "0o17", "1_000", "+5", "4294967295", "4294967296",
		"999999999999999999", "9999999999999999999", "-9223372036854775808", "", "1e3", "12a"} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte("v: "+s), &n); err != nil {
			t.Fatal(err)
		}
		v := n.Content[0].Content[1]
		got, ok := decimal(v.Value)
		if !ok {
			continue
		}
		var want int64
		if err := v.Decode(&want); err != nil || v.ShortTag() != "!!int" || got != want {
			t.Errorf("decimal(%q) = %d; yaml gives %d (%s, %v)", s, got, want, v.ShortTag(), err)
		}
	}
}
