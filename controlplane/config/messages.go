package config

import (
	"fmt"
	"unicode/utf8"

	"buf.build/go/protovalidate"
)

// celRules are the message-level rules of the schema; their messages are
// already plain sentences.
var celRules = map[string]bool{
	"limit_requires_threshold":               true,
	"ban_excludes_count_distinct":            true,
	"ban_requires_threshold":                 true,
	"count_distinct_requires_threshold":      true,
	"count_missing_requires_characteristics": true,
	"algorithm_requires_threshold":           true,
	"count_distinct_fixed_window":            true,
	"burst_requires_token_bucket":            true,
}

// noun names what a path points at, for messages.
func noun(p path, forKey bool) string {
	if len(p) == 0 {
		return "the document"
	}
	last := p[len(p)-1]
	// Inside a match value: name the match entry.
	if n := len(p); !forKey && n >= 2 {
		for i := n - 2; i >= 0 && i >= n-3; i-- {
			if p[i].field == "match" && p[i].key != nil {
				entry := "match " + quote(*p[i].key)
				switch last.field {
				case "equality", "kind":
					return entry
				case "values":
					return entry + ": one_of"
				}
				return entry + ": " + last.field
			}
		}
	}
	if forKey {
		switch last.field {
		case "available_limiters", "rate_limits":
			return "limiter name"
		case "match":
			return "match property"
		}
		return last.field + " key"
	}
	switch last.field {
	case "name":
		return "rule name"
	case "names":
		return "skip rule name"
	case "characteristics":
		if last.index >= 0 {
			return "characteristic"
		}
	case "available_properties":
		if last.index >= 0 {
			return "property"
		}
	case "count_distinct":
		return "count_distinct property"
	case "match":
		if last.key != nil {
			return "match " + quote(*last.key)
		}
	}
	return last.field
}

// violationMessage words a protovalidate violation plainly. Unknown rules fall
// back to protovalidate's own message.
func violationMessage(v *protovalidate.Violation, p path) string {
	id := v.Proto.GetRuleId()
	forKey := v.Proto.GetForKey()
	what := noun(p, forKey)
	str := func() string {
		if forKey && len(p) > 0 && p[len(p)-1].key != nil {
			return *p[len(p)-1].key
		}
		if v.FieldValue.IsValid() {
			if s, ok := v.FieldValue.Interface().(string); ok {
				return s
			}
		}
		return ""
	}
	switch id {
	case "string.pattern":
		if s := str(); s == "" {
			return what + " is missing"
		} else {
			return fmt.Sprintf("%s %s must be 1 to 64 characters, each a-z, 0-9 or _", what, quote(s))
		}
	case "required":
		if len(p) > 0 && p[len(p)-1].field == "action" {
			return "action is missing: it must be limit, log or skip"
		}
		if len(p) > 1 && p[len(p)-1].field == "kind" { // the oneof of MatchValue
			return what + " has no value: give text, {regex: ...} or {one_of: [...]}"
		}
		return what + " is missing"
	case "enum.defined_only":
		return fmt.Sprintf("%s %v is not a known value", what, v.FieldValue.Interface())
	case "uint32.gte":
		return fmt.Sprintf("%s must be at least %d, got %d", what, v.RuleValue.Uint(), v.FieldValue.Uint())
	case "map.min_pairs":
		if what == "available_limiters" {
			return "no limiters declared: available_limiters needs at least one"
		}
		return fmt.Sprintf("%s needs at least %d entries", what, v.RuleValue.Uint())
	case "string.min_len":
		if str() == "" {
			return what + " is missing"
		}
		return fmt.Sprintf("%s must be at least %d characters long", what, v.RuleValue.Uint())
	case "string.max_len":
		return fmt.Sprintf("%s is %d characters long; at most %d are allowed", what, utf8.RuneCountInString(str()), v.RuleValue.Uint())
	case "string.max_bytes":
		return fmt.Sprintf("%s is %d bytes long; at most %d are allowed", what, len(str()), v.RuleValue.Uint())
	case "repeated.unique":
		if v.FieldValue.IsValid() {
			l := v.FieldValue.List()
			seen := map[string]bool{}
			for i := 0; i < l.Len(); i++ {
				s := l.Get(i).String()
				if seen[s] {
					return fmt.Sprintf("%s lists %s twice", what, quote(s))
				}
				seen[s] = true
			}
		}
		return what + " lists a value twice"
	case "repeated.min_items":
		return fmt.Sprintf("%s needs at least %d value", what, v.RuleValue.Uint())
	}
	msg := v.Proto.GetMessage()
	if msg == "" {
		msg = "breaks rule " + id
	}
	if celRules[id] {
		return msg
	}
	return what + ": " + msg
}
