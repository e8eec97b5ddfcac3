package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/rulecheck"
	"github.com/ratekit/ratekit/internal/suggest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// maxNodes bounds the YAML nodes one document may expand to, aliases
// included, so a few lines of nested aliases cannot cost gigabytes. A larger
// document may expand to one node per byte (see decode): without aliases no
// document has more, so every document within MaxFileSize that writes its
// nodes out is read.
const maxNodes = 200_000

// maxText bounds the text one document may expand to, aliases included: the
// bytes of every string and map key the walk stores. Nodes alone did not
// bound it, as an alias of a value of 4096 bytes is one node: a valid
// rate_limits.yaml of 116 KB (a match of 32 such values, aliased by 2,560
// rules) gave 320 MiB of stored documents. Without aliases the text of a
// document within MaxFileSize is at most 1.5 times its bytes (the escape
// "\L" is three bytes of text), so every such document is read.
const maxText = 2 * MaxFileSize

type position struct{ line, col int }

// problem is an error found at a path, resolved to a position and a
// limiter/rule when the document is finished.
type problem struct {
	at        path
	forKey    bool // the map key or field name at the path, not its value
	msg       string
	line, col int // when set, the place itself (a syntax error, a bad key)
}

// doc decodes one document: a walk of the YAML nodes that fills the message
// directly, then protovalidate and the hand-written checks. Every stage
// reports all of its problems.
//
// The walk records no positions: a document is read far more often than it
// is wrong. Where each path is in the file is found only when a problem or a
// skip rule is reported, by walking the nodes again (see positions).
type doc struct {
	file       string
	root       *yaml.Node // the parsed document, nil when there is none
	rootType   protoreflect.MessageType
	at         path      // the walk's current path, a stack reused for every node
	structural []problem // shape errors of the walk
	checks     []problem // protovalidate and cross-document errors
	budget     int
	nodes      int // the node budget of a walk (maxNodes unless set)
	text       int // the text budget left (maxText at the start of a walk)
	overBudget bool
	perRequest bool // rule lists are per-request rules: no mode (ParseMessage)

	index     sync.Once // builds keyPos and valPos on the first lookup
	recording bool      // the walk of index: record positions, fill a scratch message
	valPos    map[string]position
	keyPos    map[string]position

	reflective bool     // store every value through protoreflect (see setTyped), for tests
	u32        []uint32 // see uint32Ptr
}

func newDoc(file string) *doc {
	return &doc{file: file, budget: maxNodes, nodes: maxNodes, text: maxText}
}

// decode fills msg from YAML (or JSON) data. It returns false when nothing
// could be read (a syntax error). With shape errors (an unknown field, a word
// where a number belongs) msg holds everything else, so that later checks
// still report the other problems of the file.
func (d *doc) decode(data []byte, msg proto.Message, parse func([]byte) (*yaml.Node, error)) bool {
	if len(data) > MaxFileSize { // before parsing: parsing costs many times the bytes
		d.structural = append(d.structural, problem{line: 1, col: 1,
			msg: fmt.Sprintf("the document is %d bytes, at most %d (docs/limits.md)", len(data), MaxFileSize)})
		return false
	}
	n, err := parse(data)
	if err != nil {
		d.structural = append(d.structural, syntaxProblem(data, err))
		return false
	}
	// A node takes at least one byte but for the outermost ("a:" is three
	// nodes), so a document without aliases stays within len(data)+1.
	if most := len(data) + 1; most > d.nodes {
		d.budget, d.nodes = most, most
	}
	m := msg.ProtoReflect()
	d.root, d.rootType = n, m.Type()
	d.at = make(path, 0, 8)
	d.message(n, m)
	return true
}

// positions walks the document once more, recording where the value (and
// the key) of every path the decoding walk passed is. The walk is the same
// code with the same node budget, so it reaches exactly the same nodes; its
// message and problems are thrown away.
func (d *doc) positions() {
	d.index.Do(func() {
		d.valPos, d.keyPos = map[string]position{}, map[string]position{}
		if d.root == nil {
			return
		}
		at, structural, budget, text, overBudget := d.at, d.structural, d.budget, d.text, d.overBudget
		d.recording, d.budget, d.text, d.overBudget, d.at = true, d.nodes, maxText, false, make(path, 0, 8)
		d.message(d.root, d.rootType.New())
		d.at, d.structural, d.budget, d.text, d.overBudget, d.recording = at, structural, budget, text, overBudget, false
	})
}

// rootPos is where the document starts (0:0 when it has no node).
func (d *doc) rootPos() position {
	if d.root == nil {
		return position{}
	}
	return position{d.root.Line, d.root.Column}
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

// syntaxProblem places a parser error at the line and column of the real
// problem where locateSyntaxError finds it, with a hint.
func syntaxProblem(data []byte, err error) problem {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if l, c, hint := locateSyntaxError(data, line, m[2]); l > 0 {
			if hint != "" {
				hint = " (" + hint + ")"
			}
			return problem{msg: "invalid YAML: " + m[2] + hint, line: l, col: c}
		}
		return problem{msg: "invalid YAML: " + m[2], line: line}
	}
	var je *jsonSyntaxError
	if errors.As(err, &je) {
		return problem{msg: "invalid JSON: " + je.msg, line: je.line, col: je.col}
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if off := badChar(data); off >= 0 && (strings.Contains(msg, "UTF-8") || strings.Contains(msg, "Unicode") || strings.Contains(msg, "control characters")) {
		// The parser's reader says what, not where.
		start := bytes.LastIndexByte(data[:off], '\n') + 1
		what := fmt.Sprintf("byte 0x%02x", data[off])
		if r, size := utf8.DecodeRune(data[off:]); size > 1 || r != utf8.RuneError {
			what = fmt.Sprintf("%U", r)
		}
		return problem{msg: "invalid YAML: " + msg + " (" + what + "; the file must be UTF-8 text)",
			line: bytes.Count(data[:off], []byte("\n")) + 1, col: utf8.RuneCount(data[start:off]) + 1}
	}
	return problem{msg: "invalid YAML: " + msg}
}

// badChar returns the offset of the first character the YAML reader refuses
// in UTF-8 data (invalid UTF-8, a control character), or -1 when there is
// none or the data is UTF-16.
func badChar(data []byte) int {
	if bytes.HasPrefix(data, []byte("\xff\xfe")) || bytes.HasPrefix(data, []byte("\xfe\xff")) {
		return -1
	}
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		ok := r == 0x09 || r == 0x0A || r == 0x0D || (r >= 0x20 && r <= 0x7E) || r == 0x85 ||
			(r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
		if !ok || (r == utf8.RuneError && size == 1) {
			return i
		}
		i += size
	}
	return -1
}

// fail records a shape error at the walk's current path.
func (d *doc) fail(forKey bool, format string, args ...any) {
	if d.recording {
		return
	}
	d.structural = append(d.structural, problem{at: d.here(), forKey: forKey, msg: fmt.Sprintf(format, args...)})
}

// here is a copy of the walk's current path, to keep. Its keys are copied
// too: the walk's point into the nodes, which a stored document's read
// recycles.
func (d *doc) here() path {
	p := append(path(nil), d.at...)
	for i := range p {
		if p[i].key != nil {
			k := *p[i].key
			p[i].key = &k
		}
	}
	return p
}

// push and pop move the walk's current path into and out of a field.
func (d *doc) push(field string) { d.at = append(d.at, elem{field: field, index: -1}) }
func (d *doc) pop()              { d.at = d.at[:len(d.at)-1] }

// subscript sets (and with nil, -1 clears) the map key or list index of the
// last element of the current path. key points into the YAML node, so that
// the walk allocates nothing for it.
func (d *doc) subscript(key *string, index int) {
	d.at[len(d.at)-1].key, d.at[len(d.at)-1].index = key, index
}

// record notes where the key and the value of the current path are, when
// the walk is the one of positions.
func (d *doc) record(key, val *yaml.Node) {
	if !d.recording {
		return
	}
	s := d.at.String()
	if key != nil {
		d.keyPos[s] = position{key.Line, key.Column}
	}
	if val != nil {
		d.valPos[s] = position{val.Line, val.Column}
	}
}

// visit resolves aliases and charges the node budget. It returns nil when the
// budget is spent. A mapping is charged for its keys as well: the walk reads
// every key (a duplicate, an unknown field), and a key it reports is not
// visited, so an alias to a mapping of many bad keys would otherwise cost one
// node per use and one error per key.
func (d *doc) visit(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	d.budget--
	if n.Kind == yaml.MappingNode {
		d.budget -= len(n.Content) / 2
	}
	if d.budget < 0 {
		if !d.overBudget {
			// At no path: it stops every later check, which would only see
			// part of the document.
			d.overBudget = true
			if !d.recording {
				d.structural = append(d.structural, problem{line: n.Line, col: n.Column,
					msg: fmt.Sprintf("the document is too large: over %d YAML nodes once aliases are expanded", d.nodes)})
			}
		}
		return nil
	}
	return n
}

// spend charges the text budget for n bytes of text the walk stores. When
// the budget is spent it reports so (once, at n's node) and stops the walk
// as the node budget does.
func (d *doc) spend(at *yaml.Node, n int) bool {
	if d.text -= n; d.text >= 0 {
		return true
	}
	if !d.overBudget {
		d.overBudget = true
		if !d.recording {
			d.structural = append(d.structural, problem{line: at.Line, col: at.Column,
				msg: fmt.Sprintf("the document is too large: over %d bytes of text once aliases are expanded", maxText)})
		}
	}
	d.budget = -1 // visit reads no further node
	return false
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
		return "the value " + quote(n.Value)
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

	allowedSkipRulesName = (&configv1.LimiterSpec{}).ProtoReflect().Descriptor().Fields().ByName("allowed_skip_rules").FullName()
	ruleMatchName        = (&configv1.Rule{}).ProtoReflect().Descriptor().Fields().ByName("match").FullName()
	defaultRuleMatchName = (&configv1.DefaultRule{}).ProtoReflect().Descriptor().Fields().ByName("match").FullName()
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
			return "the rules of limiter " + clip(*last.key)
		}
		return "the rules"
	case stringSetName:
		return "one_of"
	}
	return p[len(p)-1].field
}

// message walks a mapping node into m.
func (d *doc) message(n *yaml.Node, m protoreflect.Message) {
	if n = d.visit(n); n == nil || isNull(n) {
		return
	}
	md := m.Descriptor()
	if f, ok := listShorthand[md.FullName()]; ok {
		switch {
		case n.Kind == yaml.SequenceNode:
			d.push(string(f))
			d.record(nil, n)
			d.list(n, m, md.Fields().ByName(f))
			d.pop()
			return
		case n.Kind != yaml.MappingNode || !hasKey(n, string(f)):
			// Only the stored JSON writes the {"rules": [...]} envelope.
			d.fail(false, "%s must be a list, got %s", describe(md, d.at), kindName(n))
			return
		}
	}
	if md.FullName() == matchValueName && n.Kind == yaml.ScalarNode {
		if s, ok := d.str(n, "match value"); ok {
			fd, v := md.Fields().ByName("equality"), protoreflect.ValueOfString(s)
			if !d.setTyped(m, fd, v) {
				m.Set(fd, v)
			}
		}
		return
	}
	if n.Kind != yaml.MappingNode {
		if md.FullName() == matchValueName {
			d.fail(false, "a match value must be a string, {regex: ...} or {one_of: [...]}, got %s", kindName(n))
		} else {
			d.fail(false, "%s must be a mapping (name: value lines), got %s", describe(md, d.at), kindName(n))
		}
		return
	}
	fields := md.Fields()
	firsts := firstKeys(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.entry(n, i) {
			continue
		}
		d.push(k.Value)
		d.record(k, v)
		if !d.duplicate(n, i, firsts, func(name string) string { return "field " + quote(name) }) {
			d.field(v, m, fields.ByName(protoreflect.Name(k.Value)), k.Value)
		}
		d.pop()
	}
}

// field walks v, the value of the field named name of m (fd, nil when m has
// no such field), at the current path.
func (d *doc) field(v *yaml.Node, m protoreflect.Message, fd protoreflect.FieldDescriptor, name string) {
	md := m.Descriptor()
	if fd == nil {
		d.fail(true, "%s", unknownField(name, md, d.at[:len(d.at)-1]))
		return
	}
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		if set := m.WhichOneof(od); set != nil {
			// Walk it anyway for its own problems, into a message of its own.
			d.fail(true, "%s takes one of %s, not both %s and %s",
				describe(md, d.at[:len(d.at)-1]), oneofNames(od), set.Name(), name)
			m = m.New()
		}
	}
	d.value(v, m, fd)
}

func oneofNames(od protoreflect.OneofDescriptor) string {
	names := make([]string, od.Fields().Len())
	for i := range names {
		names[i] = string(od.Fields().Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// entry reports whether key i of mapping node n is a plain name; when it is
// not (a merge key <<, a list or a mapping), it reports it at the current
// path.
func (d *doc) entry(n *yaml.Node, i int) bool {
	k := n.Content[i]
	if !plainKey(k) {
		if !d.recording {
			d.structural = append(d.structural, problem{at: d.here(), line: k.Line, col: k.Column,
				msg: "YAML merge keys (<<) and keys that are not plain names are not supported"})
		}
		return false
	}
	return true
}

// duplicate reports whether key i of mapping node n repeats an earlier one
// (named by what), and reports it so. firsts is firstKeys(n).
func (d *doc) duplicate(n *yaml.Node, i int, firsts map[string]*yaml.Node, what func(string) string) bool {
	key := n.Content[i].Value
	var first *yaml.Node
	if firsts == nil {
		for j := 0; j < i; j += 2 {
			if k := n.Content[j]; plainKey(k) && k.Value == key {
				first = k
				break
			}
		}
	} else if first = firsts[key]; first == n.Content[i] {
		first = nil
	}
	if first == nil {
		return false
	}
	d.fail(true, "%s is given twice (first at line %d)", what(key), first.Line)
	return true
}

// firstKeys indexes the plain keys of a large mapping node (a map of many
// limiters, say) by name, to the first node of each, so that finding
// repeated keys stays linear. Small mappings (the fields of a message) are
// searched in place: it returns nil for them.
func firstKeys(n *yaml.Node) map[string]*yaml.Node {
	if len(n.Content) <= 2*16 {
		return nil
	}
	firsts := make(map[string]*yaml.Node, len(n.Content)/2)
	for j := 0; j+1 < len(n.Content); j += 2 {
		if k := n.Content[j]; plainKey(k) {
			if _, ok := firsts[k.Value]; !ok {
				firsts[k.Value] = k
			}
		}
	}
	return firsts
}

func plainKey(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() != "!!merge" }

// value walks the value of field fd of m. A null value is an absent field,
// but for allowed_skip_rules, whose absence allows any skip rule: a key left
// without a value (its items commented out) meant to allow fewer; and for a
// rule's match, whose absence matches every request: a match whose entries
// were commented out would turn a skip rule into a bypass of the limiter.
func (d *doc) value(n *yaml.Node, m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if n = d.visit(n); n == nil || isNull(n) {
		switch {
		case n == nil:
		case fd.FullName() == allowedSkipRulesName:
			d.fail(true, "allowed_skip_rules has no value: write [] to allow no skip rule, or leave the key out to allow any")
		case fd.FullName() == ruleMatchName || fd.FullName() == defaultRuleMatchName:
			d.fail(true, "match has no value: write {} to match every request, or leave the key out")
		}
		return
	}
	switch {
	case fd.IsMap():
		d.mapping(n, m, fd)
	case fd.IsList():
		d.list(n, m, fd)
	case fd.Kind() == protoreflect.MessageKind:
		sub := d.mutableTyped(m, fd)
		if sub == nil {
			sub = m.Mutable(fd).Message()
		}
		d.message(n, sub)
	default:
		if v, ok := d.scalar(n, fd); ok && !d.setTyped(m, fd, v) {
			m.Set(fd, v)
		}
	}
}

func (d *doc) mapping(n *yaml.Node, m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if n.Kind != yaml.MappingNode {
		d.fail(false, "%s must be a mapping (name: value lines), got %s", fd.Name(), kindName(n))
		return
	}
	match := d.matchTyped(m, fd, len(n.Content)/2)
	var out protoreflect.Map
	if match == nil {
		out = m.Mutable(fd).Map()
	}
	vd := fd.MapValue()
	what := func(k string) string { return noun(d.at, true) + " " + quote(k) }
	firsts := firstKeys(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.entry(n, i) {
			continue
		}
		d.subscript(&k.Value, -1)
		d.record(k, v)
		if len(k.Value) > rulecheck.MaxNameLen {
			// Every map of the schemas is keyed by names, ^[a-z0-9_]{1,64}$
			// (TestMapKeysAreNames): a longer key is refused here and its
			// value left unread, as the path of every node under it repeats
			// the key (a stored document of 130 KB, a 100 KB match key over
			// 4,000 one_of values, allocated 1.8 GB of paths).
			d.fail(true, "%s %s must be 1 to 64 characters, each a-z, 0-9 or _", noun(d.at, true), quote(k.Value))
			d.subscript(nil, -1)
			continue
		}
		if !d.spend(k, len(k.Value)) {
			d.subscript(nil, -1)
			break
		}
		if !d.duplicate(n, i, firsts, what) {
			if match != nil {
				val := &configv1.MatchValue{}
				d.message(v, val.ProtoReflect())
				match[validUTF8(k.Value)] = val
				d.subscript(nil, -1)
				continue
			}
			key := protoreflect.ValueOfString(validUTF8(k.Value)).MapKey()
			if vd.Kind() == protoreflect.MessageKind {
				// The entry is kept even when its value is badly shaped, so
				// that later checks still see the key.
				val := out.NewValue()
				d.message(v, val.Message())
				out.Set(key, val)
			} else if val, ok := d.scalar(v, vd); ok {
				out.Set(key, val)
			}
		}
		d.subscript(nil, -1)
	}
}

func (d *doc) list(n *yaml.Node, m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if n.Kind != yaml.SequenceNode {
		d.fail(false, "%s must be a list, got %s", fd.Name(), kindName(n))
		return
	}
	typed, ok := d.listTyped(m, fd, len(n.Content))
	var out protoreflect.List
	if !ok {
		out = m.Mutable(fd).List()
	}
	for i, item := range n.Content {
		d.subscript(nil, i)
		d.record(nil, item)
		switch {
		case typed.rules != nil:
			r := &configv1.Rule{}
			d.message(item, r.ProtoReflect())
			*typed.rules = append(*typed.rules, r)
			continue
		case typed.strs != nil:
			s := "" // a placeholder when the value is bad, as below
			if val, ok := d.scalar(item, fd); ok {
				s = val.String()
			}
			*typed.strs = append(*typed.strs, s)
			continue
		}
		if fd.Kind() == protoreflect.MessageKind {
			val := out.NewElement()
			d.message(item, val.Message())
			out.Append(val)
		} else if val, ok := d.scalar(item, fd); ok {
			out.Append(val)
		} else {
			out.Append(out.NewElement()) // a placeholder, keeping indexes aligned with the file; the shape error rejects the document
		}
	}
	d.subscript(nil, -1)
}

// scalar walks one value of fd's (non-message) element type.
func (d *doc) scalar(n *yaml.Node, fd protoreflect.FieldDescriptor) (protoreflect.Value, bool) {
	name := string(fd.Name())
	if n = d.visit(n); n == nil {
		return protoreflect.Value{}, false
	}
	if isNull(n) {
		d.fail(false, "%s has no value", name)
		return protoreflect.Value{}, false
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s, ok := d.str(n, name); ok {
			return protoreflect.ValueOfString(s), true
		}
	case protoreflect.Uint32Kind:
		if v, ok := d.uint32(n, name); ok {
			return protoreflect.ValueOfUint32(v), true
		}
	case protoreflect.EnumKind:
		if v, ok := d.enum(n, fd.Enum(), name); ok {
			return protoreflect.ValueOfEnum(v), true
		}
	case protoreflect.BoolKind:
		if v, ok := d.bool(n, name); ok {
			return protoreflect.ValueOfBool(v), true
		}
	default:
		d.fail(false, "%s: the schema has a field of kind %s that the YAML reader does not handle", name, fd.Kind())
	}
	return protoreflect.Value{}, false
}

// validUTF8 returns s with each byte of invalid UTF-8 replaced by U+FFFD,
// as encoding/json does. The parsers give valid UTF-8 (YAML requires it,
// and the JSON reader replaces it), so this only guards proto's rule that
// strings be UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// str reads a scalar as text. Numbers and booleans are accepted and rendered
// as an Identifier canonicalizes its values (keys.Canonical), so `project_id: 42`
// matches the identifier value 42.
func (d *doc) str(n *yaml.Node, name string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(false, "%s must be a single value, got %s", name, kindName(n))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!timestamp": // a date stays as written
		if !d.spend(n, len(n.Value)) {
			return "", false
		}
		return validUTF8(n.Value), true
	case "!!int", "!!float", "!!bool":
		var v any
		if err := n.Decode(&v); err == nil && v != nil {
			s := keys.Canonical(v) // the text stored
			if !d.spend(n, len(s)) {
				return "", false
			}
			return s, true
		}
	}
	d.fail(false, "%s must be text, got %s", name, kindName(n))
	return "", false
}

func (d *doc) uint32(n *yaml.Node, name string) (uint32, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.fail(false, "%s must be a whole number, got %s", name, kindName(n))
		return 0, false
	}
	v, ok := decimal(n.Value)
	var err error
	if !ok { // YAML's other spellings of integers: 0x1F, 1_000, ...
		var y int64 // its own variable: Decode takes its address, which moves it to the heap
		err = n.Decode(&y)
		v = y
	}
	if err != nil || v > math.MaxUint32 {
		d.fail(false, "%s must be at most %d, got %s", name, uint32(math.MaxUint32), clip(n.Value))
		return 0, false
	}
	if v < 0 {
		d.fail(false, "%s must be at least 1, got %s", name, clip(n.Value))
		return 0, false
	}
	return uint32(v), true
}

// bool reads true or false; YAML 1.1's yes/no/on/off are YAML 1.2 text, so
// they are refused rather than guessed.
func (d *doc) bool(n *yaml.Node, name string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var v bool
		if err := n.Decode(&v); err == nil {
			return v, true
		}
	}
	d.fail(false, "%s must be true or false, got %s", name, kindName(n))
	return false, false
}

// decimal parses the plain decimal spelling of an integer (as JSON writes
// it), which every YAML reading gives the same value, without the reflection
// of yaml.Node.Decode.
func decimal(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// enum reads the lower-case spelling of the config files: `limit` for
// ACTION_LIMIT.
func (d *doc) enum(n *yaml.Node, ed protoreflect.EnumDescriptor, name string) (protoreflect.EnumNumber, bool) {
	words := enumWords(ed)
	if n.Kind == yaml.ScalarNode {
		for i, w := range words {
			if n.Value == w {
				return ed.Values().Get(i + 1).Number(), true
			}
		}
	}
	d.fail(false, "%s must be one of %s, got %s", name, strings.Join(words, ", "), kindName(n))
	return 0, false
}

// enumWords returns the lower-case spellings of an enum's values after the
// UNSPECIFIED zero value: ACTION_LIMIT → limit. They are worked out once per
// enum; callers must not modify them.
func enumWords(ed protoreflect.EnumDescriptor) []string {
	if w, ok := enumWordCache.Load(ed.FullName()); ok {
		return w.([]string)
	}
	prefix := strings.ToUpper(camelToSnake(string(ed.Name()))) + "_"
	vals := ed.Values()
	words := make([]string, 0, vals.Len()-1)
	for i := 1; i < vals.Len(); i++ {
		words = append(words, strings.ToLower(strings.TrimPrefix(string(vals.Get(i).Name()), prefix)))
	}
	enumWordCache.Store(ed.FullName(), words)
	return words
}

// enumWordCache maps an enum's full name to its enumWords. The schemas are
// compiled in, so it stays small.
var enumWordCache sync.Map

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
	for i := 0; i < fields.Len(); i++ {
		known = append(known, string(fields.Get(i).Name()))
	}
	if best := suggest.Closest(name, known); best != "" {
		return fmt.Sprintf("unknown field %s (did you mean %q?)", quote(name), best)
	}
	sort.Strings(known)
	return fmt.Sprintf("unknown field %s; %s takes %s", quote(name), describe(md, p), strings.Join(known, ", "))
}

// validate runs protovalidate and records each violation as a problem. The
// rules that validRule proves valid are skipped (see skipValidRules).
func (d *doc) validate(msg proto.Message) {
	err := protovalidate.Validate(msg, protovalidate.WithFilter(&skipValidRules{}))
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
	d.positions()
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
	return d.rootPos()
}

// result turns the problems into a *ValidationError (nil when there are none).
// A problem of protovalidate or of the checks is dropped when it only echoes a
// shape error: it lies inside the badly shaped part, or it is about the
// message whose field was badly shaped (a "limit: ten" also makes the rule
// lack a limit).
func (d *doc) result(msg proto.Message) error {
	probs := append([]problem(nil), d.structural...)
	echo := newEchoes(d.structural)
	for _, c := range d.checks {
		if !echo.of(c.at) {
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
			e.Path = pr.at.clipped().String()
			e.Limiter, e.Rule = locate(msg.ProtoReflect(), pr.at)
			e.Limiter, e.Rule = clip(e.Limiter), clip(e.Rule)
		}
		errs = append(errs, e)
	}
	return newValidationError(errs)
}

// echoes indexes the paths of the shape errors, so that result tells the
// checks that echo one in time linear in the problems: a document of many
// badly shaped rules has about as many checks as shape errors, and testing
// each pair took minutes for a stored document of 1 MiB.
type echoes struct {
	all     bool            // a shape error at no path: every check echoes it
	at      map[string]bool // the path of each shape error
	parent  map[string]bool // the path of each shape error less its last element
	parentF map[string]bool // the same with the subscript of its last element cleared
}

func newEchoes(structural []problem) echoes {
	e := echoes{at: map[string]bool{}, parent: map[string]bool{}, parentF: map[string]bool{}}
	for _, s := range structural {
		if len(s.at) == 0 {
			e.all = true
			continue
		}
		e.at[s.at.String()] = true
		up := s.at[:len(s.at)-1]
		e.parent[up.String()] = true
		if len(up) > 0 {
			e.parentF[up.fieldString()] = true
		}
	}
	return e
}

// of reports whether a check at p echoes a shape error s: p lies within s
// (p.within(s)), or s is one element below p (s.within(p)).
func (e echoes) of(p path) bool {
	if e.all {
		return true
	}
	for k := 1; k <= len(p); k++ {
		// An s whose last element has no subscript holds every subscript of
		// that field.
		if e.at[p[:k].String()] || e.at[p[:k].fieldString()] {
			return true
		}
	}
	if n := len(p); n > 0 && p[n-1].key == nil && p[n-1].index < 0 {
		return e.parentF[p.String()]
	}
	return e.parent[p.String()]
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
