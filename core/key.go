package ratelimit

import "github.com/ratekit/ratekit/internal/keys"

// Counter keys look like <prefix>{<limiter>:<rule>:<prop>=<value>...}, with
// ":ban" appended for a ban and ":set" for a distinct-value set; the braces are
// a Redis Cluster hash tag, so a counter and its ban share a slot. The encoding
// (escaping, hashing of long values) lives in internal/keys, shared with the
// stores and the tools; a compiled rule escapes its own parts once.

const banSuffix = keys.BanSuffix

// keyPlan holds the parts of a rule's counter keys that do not depend on the
// identifier, escaped once when the rule is compiled, so that a check only
// appends them and the identifier's values.
type keyPlan struct {
	name  string   // ":<rule>", after "<prefix>{<limiter>"
	chars []string // the characteristics, to read from the identifier
	props []string // ":<escaped characteristic>=" for each characteristic
	tail  string   // "}", or "}:set" for a count_distinct rule
}

func newKeyPlan(r *Rule) keyPlan {
	p := keyPlan{name: ":" + r.Name, chars: r.Characteristics, tail: "}"}
	p.props = make([]string, len(r.Characteristics))
	for i, c := range r.Characteristics {
		p.props[i] = string(append(keys.AppendEscaped([]byte{':'}, c), '='))
	}
	if r.CountDistinct != "" {
		p.tail += keys.SetSuffix
	}
	return p
}

// appendKey appends the counter key of the plan for id after head
// ("<prefix>{<limiter>") and returns the first characteristic the identifier
// lacks ("" when it has them all), reading each property once.
func (p *keyPlan) appendKey(b []byte, head string, id Identifier) (_ []byte, missing string) {
	b = append(b, head...)
	b = append(b, p.name...)
	for i, c := range p.chars {
		b = append(b, p.props[i]...)
		v, ok := id.Get(c)
		if !ok {
			if missing == "" {
				missing = c
			}
			b = append(b, keys.Missing)
			continue
		}
		b = keys.AppendValue(b, v)
	}
	return append(b, p.tail...), missing
}

// keyHead is the start of every counter key of a limiter: the prefix and the
// opening of the hash tag with the limiter's name.
func keyHead(prefix, limiter string) string { return prefix + "{" + limiter }

// counterKey builds the key of one rule for one identifier.
func counterKey(prefix, limiter string, r *Rule, id Identifier) string {
	p := newKeyPlan(r)
	b, _ := p.appendKey(nil, keyHead(prefix, limiter), id)
	return string(b)
}
