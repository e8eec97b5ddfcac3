package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"buf.build/go/protovalidate"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ratekit/ratekit/internal/keys"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// maxNodes bounds the YAML nodes one document may expand to, aliases
// included, so a few lines of nested aliases cannot cost gigabytes.
const maxNodes = 200_000

type position struct{ line, col int }

// problem is an error found at a path, resolved to a position and a
// limiter/rule when the document is finished.
type problem struct {
	at        path
	forKey    bool // the map key or field name at the path, not its value
	msg       string
	line, col int // when set, the place itself (a syntax error, a bad key)
}

// doc decodes one document: YAML nodes to the protojson form of a message
// (recording where each value was), then protojson, protovalidate, and the
// hand-written checks. Every stage reports all of its problems.
type doc struct {
	file       string
	valPos     map[string]position
	keyPos     map[string]position
	root       position
	structural []problem // shape errors of the walk
	checks     []problem // protovalidate and cross-document errors
	budget     int
	overBudget bool
}

func newDoc(file string) *doc {
	return &doc{file: file, valPos: map[string]position{}, keyPos: map[string]position{}, budget: maxNodes}
}

// decode fills msg from YAML (or JSON) data. It returns false when nothing
// could be read (a syntax error). With shape errors (an unknown field, a word
// where a number belongs) msg holds everything else, so that later checks
// still report the other problems of the file.
func (d *doc) decode(data []byte, msg proto.Message, parse func([]byte) (*yaml.Node, error)) bool {
	n, err := parse(data)
	if err != nil {
		d.structural = append(d.structural, syntaxProblem(err))
		return false
	}
	if n != nil {
		d.root = position{n.Line, n.Column}
	} else {
		d.root = position{}
	}
	tree := d.message(n, msg.ProtoReflect().Descriptor(), nil)
	b, err := json.Marshal(tree)
	if err == nil {
		err = protojson.UnmarshalOptions{}.Unmarshal(b, msg)
	}
	if err != nil {
		// The walk admits only what the schema allows, so this is a bug, but
		// it must still reject the document rather than half-read it.
		d.structural = append(d.structural, problem{msg: fmt.Sprintf("cannot decode the document: %v", err)})
		return false
	}
	return true
}

// parseYAML reads exactly one YAML document. An empty document gives nil.
func parseYAML(data []byte) (n *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil { // the parser must never take a service down
			n, err = nil, fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err == nil {
			return nil, fmt.Errorf("yaml: line %d: the file holds a second YAML document (after ---); put everything in one", extra.Line)
		}
		return nil, err
	}
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		return root.Content[0], nil
	}
	return &root, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func syntaxProblem(err error) problem {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return problem{msg: "invalid YAML: " + m[2], line: line}
	}
	var je *jsonSyntaxError
	if errors.As(err, &je) {
		return problem{msg: "invalid JSON: " + je.msg, line: je.line, col: je.col}
	}
	return problem{msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

func (d *doc) fail(p path, forKey bool, format string, args ...any) {
	d.structural = append(d.structural, problem{at: p, forKey: forKey, msg: fmt.Sprintf(format, args...)})
}

func (d *doc) record(p path, key, val *yaml.Node) {
	s := p.String()
	if key != nil {
		d.keyPos[s] = position{key.Line, key.Column}
	}
	if val != nil {
		d.valPos[s] = position{val.Line, val.Column}
	}
}

// visit resolves aliases and charges the node budget. It returns nil when the
// budget is spent.
func (d *doc) visit(n *yaml.Node, p path) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	d.budget--
	if d.budget < 0 {
		if !d.overBudget {
			// At no path: it stops every later check, which would only see
			// part of the document.
			d.overBudget = true
			d.structural = append(d.structural, problem{line: n.Line, col: n.Column,
				msg: fmt.Sprintf("the document is too large: over %d YAML nodes once aliases are expanded", maxNodes)})
		}
		return nil
	}
	return n
}

func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "something else"
}

// listShorthand names the messages that YAML may write as a bare list of
// their one repeated field: `pipelines_create: [rule, ...]` for a RuleList.
var listShorthand = map[protoreflect.FullName]protoreflect.Name{
	(&configv1.RuleList{}).ProtoReflect().Descriptor().FullName():          "rules",
	(&configv1.SkipRuleAllowList{}).ProtoReflect().Descriptor().FullName(): "names",
	(&configv1.StringSet{}).ProtoReflect().Descriptor().FullName():         "values",
}

var (
	matchValueName  = (&configv1.MatchValue{}).ProtoReflect().Descriptor().FullName()
	ruleName        = (&configv1.Rule{}).ProtoReflect().Descriptor().FullName()
	defaultRuleName = (&configv1.DefaultRule{}).ProtoReflect().Descriptor().FullName()
	limiterSpecName = (&configv1.LimiterSpec{}).ProtoReflect().Descriptor().FullName()
	ruleListName    = (&configv1.RuleList{}).ProtoReflect().Descriptor().FullName()
	stringSetName   = (&configv1.StringSet{}).ProtoReflect().Descriptor().FullName()
)

func describe(md protoreflect.MessageDescriptor, p path) string {
	switch md.FullName() {
	case ruleName, defaultRuleName:
		return "a rule"
	case limiterSpecName:
		return "a limiter"
	case matchValueName:
		return "a match value"
	}
	if len(p) == 0 {
		return "the document"
	}
	switch md.FullName() {
	case ruleListName:
		if last := p[len(p)-1]; last.key != nil {
			return fmt.Sprintf("the rules of limiter %s", *last.key)
		}
		return "the rules"
	case stringSetName:
		return "one_of"
	}
	return p[len(p)-1].field
}

// message walks a mapping node as message md and returns its protojson form.
func (d *doc) message(n *yaml.Node, md protoreflect.MessageDescriptor, p path) map[string]any {
	out := map[string]any{}
	if n = d.visit(n, p); n == nil || isNull(n) {
		return out
	}
	if f, ok := listShorthand[md.FullName()]; ok {
		switch {
		case n.Kind == yaml.SequenceNode:
			fd := md.Fields().ByName(f)
			fp := p.field(string(f))
			d.record(fp, nil, n)
			out[string(f)] = d.list(n, fd, fp)
			return out
		case n.Kind != yaml.MappingNode || !hasKey(n, string(f)):
			// Only the stored JSON writes the {"rules": [...]} envelope.
			d.fail(p, false, "%s must be a list, got %s", describe(md, p), kindName(n))
			return out
		}
	}
	if md.FullName() == matchValueName && n.Kind == yaml.ScalarNode {
		if s, ok := d.str(n, p, "match value"); ok {
			out["equality"] = s
		}
		return out
	}
	if n.Kind != yaml.MappingNode {
		if md.FullName() == matchValueName {
			d.fail(p, false, "a match value must be a string, {regex: ...} or {one_of: [...]}, got %s", kindName(n))
		} else {
			d.fail(p, false, "%s must be a mapping (name: value lines), got %s", describe(md, p), kindName(n))
		}
		return out
	}
	d.entries(n, p, p.field, func(name string) string { return fmt.Sprintf("field %q", name) },
		func(name string, v *yaml.Node, fp path) {
			fd := md.Fields().ByName(protoreflect.Name(name))
			if fd == nil {
				d.fail(fp, true, "%s", unknownField(name, md, p))
				return
			}
			if val, ok := d.value(v, fd, fp); ok {
				out[name] = val
			}
		})
	return out
}

// value walks the value of field fd.
func (d *doc) value(n *yaml.Node, fd protoreflect.FieldDescriptor, p path) (any, bool) {
	if n = d.visit(n, p); n == nil || isNull(n) {
		return nil, false
	}
	switch {
	case fd.IsMap():
		return d.mapping(n, fd, p)
	case fd.IsList():
		return d.list(n, fd, p), true
	}
	return d.single(n, fd, p)
}

func (d *doc) mapping(n *yaml.Node, fd protoreflect.FieldDescriptor, p path) (any, bool) {
	if n.Kind != yaml.MappingNode {
		d.fail(p, false, "%s must be a mapping (name: value lines), got %s", fd.Name(), kindName(n))
		return nil, false
	}
	out := map[string]any{}
	d.entries(n, p, p.key, func(k string) string { return fmt.Sprintf("%s %q", noun(p.key(k), true), k) },
		func(k string, v *yaml.Node, kp path) {
			if val, ok := d.single(v, fd.MapValue(), kp); ok {
				out[k] = val
			} else if fd.MapValue().Kind() == protoreflect.MessageKind {
				out[k] = map[string]any{} // keep the entry, so later checks still see the key
			}
		})
	return out, true
}

// entries calls f once for each key of mapping node n, with the key's path
// (made by at) recorded. Keys that are not plain names, and repeated keys
// (named by what), are reported instead. It returns the keys seen.
func (d *doc) entries(n *yaml.Node, p path, at func(string) path, what func(string) string, f func(key string, v *yaml.Node, kp path)) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			d.structural = append(d.structural, problem{at: p, line: k.Line, col: k.Column,
				msg: "YAML merge keys (<<) and keys that are not plain names are not supported"})
			continue
		}
		kp := at(k.Value)
		d.record(kp, k, v)
		if first, dup := seen[k.Value]; dup {
			d.fail(kp, true, "%s is given twice (first at line %d)", what(k.Value), first.Line)
			continue
		}
		seen[k.Value] = k
		f(k.Value, v, kp)
	}
	return seen
}

func (d *doc) list(n *yaml.Node, fd protoreflect.FieldDescriptor, p path) []any {
	if n.Kind != yaml.SequenceNode {
		d.fail(p, false, "%s must be a list, got %s", fd.Name(), kindName(n))
		return nil
	}
	out := make([]any, 0, len(n.Content))
	for i, item := range n.Content {
		ip := p.at(i)
		d.record(ip, nil, item)
		if val, ok := d.single(item, fd, ip); ok {
			out = append(out, val)
		} else if fd.Kind() == protoreflect.MessageKind {
			out = append(out, map[string]any{}) // keep indexes aligned with the file
		} else {
			out = append(out, "") // a placeholder; the shape error rejects the document
		}
	}
	return out
}

// single walks one value of fd's element type.
func (d *doc) single(n *yaml.Node, fd protoreflect.FieldDescriptor, p path) (any, bool) {
	name := string(fd.Name())
	if fd.IsMap() {
		name = p[len(p)-1].field
	}
	switch fd.Kind() {
	case protoreflect.MessageKind:
		m := d.message(n, fd.Message(), p)
		return m, true
	}
	if n = d.visit(n, p); n == nil {
		return nil, false
	}
	if isNull(n) {
		d.fail(p, false, "%s has no value", name)
		return nil, false
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return d.str(n, p, name)
	case protoreflect.Uint32Kind:
		return d.uint32(n, p, name)
	case protoreflect.EnumKind:
		return d.enum(n, fd.Enum(), p, name)
	}
	d.fail(p, false, "%s: the schema has a field of kind %s that the YAML reader does not handle", name, fd.Kind())
	return nil, false
}

// str reads a scalar as text. Numbers and booleans are accepted and rendered
// as an Identifier canonicalizes its values (keys.Canonical), so `project_id: 42`
// matches the identifier value 42.
func (d *doc) str(n *yaml.Node, p path, name string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(p, false, "%s must be a single value, got %s", name, kindName(n))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!timestamp": // a date stays as written
		return n.Value, true
	case "!!int", "!!float", "!!bool":
		var v any
		if err := n.Decode(&v); err == nil && v != nil {
			return keys.Canonical(v), true
		}
	}
	d.fail(p, false, "%s must be text, got %s", name, kindName(n))
	return "", false
}

func (d *doc) uint32(n *yaml.Node, p path, name string) (uint64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.fail(p, false, "%s must be a whole number, got %s", name, kindName(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil || v > math.MaxUint32 {
		d.fail(p, false, "%s must be at most %d, got %s", name, uint32(math.MaxUint32), n.Value)
		return 0, false
	}
	if v < 0 {
		d.fail(p, false, "%s must be at least 1, got %s", name, n.Value)
		return 0, false
	}
	return uint64(v), true
}

// enum reads the lower-case spelling of the config files: `limit` for
// ACTION_LIMIT.
func (d *doc) enum(n *yaml.Node, ed protoreflect.EnumDescriptor, p path, name string) (string, bool) {
	words := enumWords(ed)
	if n.Kind == yaml.ScalarNode {
		for i, w := range words {
			if n.Value == w {
				return string(ed.Values().Get(i + 1).Name()), true
			}
		}
	}
	d.fail(p, false, "%s must be one of %s, got %s", name, strings.Join(words, ", "), kindName(n))
	return "", false
}

// enumWords returns the lower-case spellings of an enum's values after the
// UNSPECIFIED zero value: ACTION_LIMIT → limit.
func enumWords(ed protoreflect.EnumDescriptor) []string {
	prefix := strings.ToUpper(camelToSnake(string(ed.Name()))) + "_"
	vals := ed.Values()
	words := make([]string, 0, vals.Len()-1)
	for i := 1; i < vals.Len(); i++ {
		words = append(words, strings.ToLower(strings.TrimPrefix(string(vals.Get(i).Name()), prefix)))
	}
	return words
}

func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unknownField(name string, md protoreflect.MessageDescriptor, p path) string {
	fields := md.Fields()
	known := make([]string, 0, fields.Len())
	best, bestDist := "", 3
	for i := 0; i < fields.Len(); i++ {
		f := string(fields.Get(i).Name())
		known = append(known, f)
		if dist := editDistance(name, f); dist < bestDist {
			best, bestDist = f, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown field %q (did you mean %q?)", name, best)
	}
	sort.Strings(known)
	return fmt.Sprintf("unknown field %q; %s takes %s", name, describe(md, p), strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance, for "did you mean" hints.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// validate runs protovalidate and records each violation as a problem.
func (d *doc) validate(msg proto.Message) {
	err := protovalidate.Validate(msg)
	if err == nil {
		return
	}
	var ve *protovalidate.ValidationError
	if !errors.As(err, &ve) {
		d.checks = append(d.checks, problem{msg: fmt.Sprintf("cannot validate the document: %v", err)})
		return
	}
	for _, v := range ve.Violations {
		var p path
		for _, e := range v.Proto.GetField().GetElements() {
			x := elem{field: e.GetFieldName(), index: -1}
			if e.HasIndex() {
				x.index = int(e.GetIndex())
			} else if e.HasStringKey() {
				k := e.GetStringKey()
				x.key = &k
			}
			p = append(p, x)
		}
		msg := violationMessage(v, p)
		if n := len(p); n > 0 && p[n-1].field == "kind" {
			p = p[:n-1] // the oneof of MatchValue: the problem is the value itself
		}
		d.checks = append(d.checks, problem{at: p, forKey: v.Proto.GetForKey(), msg: msg})
	}
}

func (d *doc) check(p path, forKey bool, format string, args ...any) {
	d.checks = append(d.checks, problem{at: p, forKey: forKey, msg: fmt.Sprintf(format, args...)})
}

// lookup returns where p is in the file: the value (or key) at p, else its
// nearest recorded ancestor.
func (d *doc) lookup(p path, forKey bool) position {
	if forKey {
		if pos, ok := d.keyPos[p.String()]; ok {
			return pos
		}
	}
	for q := p; len(q) > 0; {
		if pos, ok := d.valPos[q.String()]; ok {
			return pos
		}
		last := q[len(q)-1]
		if last.key != nil || last.index >= 0 {
			q = append(path(nil), q...)
			q[len(q)-1].key, q[len(q)-1].index = nil, -1
			continue
		}
		q = q[:len(q)-1]
	}
	return d.root
}

// result turns the problems into a *ValidationError (nil when there are none).
// A problem of protovalidate or of the checks is dropped when it only echoes a
// shape error: it lies inside the badly shaped part, or it is about the
// message whose field was badly shaped (a "limit: ten" also makes the rule
// lack a limit).
func (d *doc) result(msg proto.Message) error {
	probs := append([]problem(nil), d.structural...)
	for _, c := range d.checks {
		echo := false
		for _, s := range d.structural {
			if len(s.at) == 0 || c.at.within(s.at) || (len(s.at) == len(c.at)+1 && s.at.within(c.at)) {
				echo = true
				break
			}
		}
		if !echo {
			probs = append(probs, c)
		}
	}
	if len(probs) == 0 {
		return nil
	}
	errs := make([]*Error, 0, len(probs))
	for _, pr := range probs {
		e := &Error{File: d.file, Message: pr.msg, Line: pr.line, Column: pr.col}
		if pr.line == 0 {
			pos := d.lookup(pr.at, pr.forKey)
			e.Line, e.Column = pos.line, pos.col
		}
		if len(pr.at) > 0 {
			e.Path = pr.at.String()
			e.Limiter, e.Rule = locate(msg.ProtoReflect(), pr.at)
		}
		errs = append(errs, e)
	}
	sortErrors(errs)
	return &ValidationError{Errors: errs}
}

// locate finds the limiter and rule a path lies in: the first string map key
// on the way is the limiter, a Rule or DefaultRule list element the rule.
func locate(m protoreflect.Message, p path) (limiter, rule string) {
	for _, e := range p {
		if m == nil {
			return
		}
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(e.field))
		if fd == nil {
			return
		}
		switch {
		case fd.IsMap() && e.key != nil:
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				if n := fd.MapValue().Message().FullName(); n == limiterSpecName || n == ruleListName {
					limiter = *e.key
				}
			}
			v := m.Get(fd).Map().Get(protoreflect.ValueOfString(*e.key).MapKey())
			if !v.IsValid() || fd.MapValue().Kind() != protoreflect.MessageKind {
				return
			}
			m = v.Message()
		case fd.IsList() && e.index >= 0:
			l := m.Get(fd).List()
			if e.index >= l.Len() || fd.Kind() != protoreflect.MessageKind {
				return
			}
			m = l.Get(e.index).Message()
			if n := m.Descriptor().FullName(); n == ruleName || n == defaultRuleName {
				rule = m.Get(m.Descriptor().Fields().ByName("name")).String()
				if rule == "" {
					rule = fmt.Sprintf("#%d", e.index+1)
				}
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			m = m.Get(fd).Message()
		default:
			return
		}
	}
	return
}
