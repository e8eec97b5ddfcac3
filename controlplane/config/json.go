package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// The rule store keeps one LimiterRules document per limiter as JSON
// (docs/design.md#the-rule-store), in the spelling of the config files rather than plain
// protojson: lower-case actions, match values as in YAML, and a fixed field
// order, so the bytes equal the design's example and every SDK can write them:
//
//	{"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]}}
//
// Tiers appear in alphabetical order and only when set; a tier that sets the
// limiter's mode writes it first: {"mode":"shadow","rules":[...]}. A rule is written as
// name, description, limit, period_s, action, characteristics,
// count_missing (only when true), count_distinct, ban_for_s, algorithm (only when set), burst, match; unset optional fields and empty strings
// are left out, characteristics and match are always written. Match keys are
// sorted; a value is a JSON string (equality), {"regex":"..."} or
// {"one_of":[...]}.

// MarshalLimiterRules validates doc (as UnmarshalLimiterRules does) and
// encodes it. An invalid document is a *ValidationError: the store never
// holds what it could not read back.
func MarshalLimiterRules(doc *configv1.LimiterRules) ([]byte, error) {
	if err := ValidateLimiterRules(doc); err != nil {
		return nil, err
	}
	return encodeLimiterRules(doc), nil
}

// encodeLimiterRules writes a valid document (an invalid one may panic).
func encodeLimiterRules(doc *configv1.LimiterRules) []byte {
	w := &jsonWriter{}
	w.WriteByte('{')
	tiers := []struct {
		name string
		list *configv1.RuleList
	}{
		{"default_rules", doc.GetDefaultRules()},
		{"file_rules", doc.GetFileRules()},
		{"published_rules", doc.GetPublishedRules()},
	}
	n := 0
	for _, t := range tiers {
		if t.list == nil {
			continue
		}
		if n > 0 {
			w.WriteByte(',')
		}
		n++
		w.str(t.name)
		w.WriteString(`:{`)
		if m := t.list.GetMode(); m != configv1.Mode_MODE_UNSPECIFIED {
			w.WriteString(`"mode":`)
			w.str(ModeWord(m))
			w.WriteByte(',')
		}
		w.WriteString(`"rules":[`)
		for i, r := range t.list.GetRules() {
			if i > 0 {
				w.WriteByte(',')
			}
			w.rule(r)
		}
		w.WriteString("]}")
	}
	w.WriteByte('}')
	return w.Bytes()
}

// MarshalRule encodes one rule exactly as MarshalLimiterRules writes it
// inside a document (the rule store splices these bytes into stored documents
// server-side). The rule is validated as a one-rule tier would be.
func MarshalRule(r *configv1.Rule) ([]byte, error) {
	if err := ValidateLimiterRules(&configv1.LimiterRules{DefaultRules: &configv1.RuleList{Rules: []*configv1.Rule{r}}}); err != nil {
		return nil, err
	}
	w := &jsonWriter{}
	w.rule(r)
	return w.Bytes(), nil
}

// UnmarshalLimiterRules decodes a stored document strictly (unknown fields,
// duplicate keys and wrong types are errors) and validates it: protovalidate,
// unique rule names within each tier, regexes valid RE2. Errors are a
// *ValidationError whose positions are line:column in data. The message's
// strings are cut from one copy of data, which they keep alive together
// (data itself is not kept).
func UnmarshalLimiterRules(data []byte) (*configv1.LimiterRules, error) {
	return unmarshalLimiterRules(data, false)
}

// unmarshalLimiterRules is UnmarshalLimiterRules; reflective stores every
// value through protoreflect (see setTyped), for tests.
func unmarshalLimiterRules(data []byte, reflective bool) (*configv1.LimiterRules, error) {
	d := newDoc("")
	d.reflective = reflective
	// JSON has no aliases: its nodes are bounded by its bytes (MaxFileSize),
	// and any document a writer may store must be readable.
	d.budget, d.nodes = MaxFileSize, MaxFileSize
	msg := &configv1.LimiterRules{}
	var nodes *validJSON
	parse := func(data []byte) (*yaml.Node, error) {
		if err := notUTF8Text(data); err != nil {
			return nil, err
		}
		if !json.Valid(data) {
			return parseJSONTokens(data)
		}
		nodes = newValidJSON(data)
		return nodes.value(), nil
	}
	if d.decode(data, msg, parse) {
		d.validateLimiterRules(msg)
	}
	err := d.result(msg)
	if nodes != nil {
		// The message and the errors hold no node: their strings are their
		// own or cut from the copy of the document, never from a node.
		d.root = nil
		nodes.release()
	}
	if err != nil {
		return nil, err
	}
	return msg, nil
}

// ValidateLimiterRules checks a document built in code as
// UnmarshalLimiterRules checks a stored one.
func ValidateLimiterRules(doc *configv1.LimiterRules) error {
	d := newDoc("")
	d.validateLimiterRules(doc)
	return d.result(doc)
}

func (d *doc) validateLimiterRules(msg *configv1.LimiterRules) {
	d.validate(msg)
	d.checkRules(nil, path{}.field("file_rules").field("rules"), msg.GetFileRules().GetRules())
	d.checkRules(nil, path{}.field("published_rules").field("rules"), msg.GetPublishedRules().GetRules())
	d.checkRules(nil, path{}.field("default_rules").field("rules"), msg.GetDefaultRules().GetRules())
}

type jsonWriter struct{ bytes.Buffer }

// str writes s as a JSON string without HTML escaping, so "<anonymous>" stays
// readable and equal to what other languages write.
func (w *jsonWriter) str(s string) {
	enc := json.NewEncoder(&w.Buffer)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	w.Truncate(w.Len() - 1) // Encode appends a newline
}

func (w *jsonWriter) field(name string) {
	w.WriteByte(',')
	w.str(name)
	w.WriteByte(':')
}

func (w *jsonWriter) rule(r *configv1.Rule) {
	w.WriteString(`{"name":`)
	w.str(r.GetName())
	if r.GetDescription() != "" {
		w.field("description")
		w.str(r.GetDescription())
	}
	w.optUint("limit", r.Limit)
	w.optUint("period_s", r.PeriodS)
	w.field("action")
	w.str(enumWords(r.GetAction().Descriptor())[r.GetAction()-1]) // validated: never UNSPECIFIED
	w.field("characteristics")
	w.strings(r.GetCharacteristics())
	if r.GetCountMissing() {
		w.WriteString(`,"count_missing":true`)
	}
	if r.GetCountDistinct() != "" {
		w.field("count_distinct")
		w.str(r.GetCountDistinct())
	}
	w.optUint("ban_for_s", r.BanForS)
	if a := r.GetAlgorithm(); a != configv1.Algorithm_ALGORITHM_UNSPECIFIED {
		w.field("algorithm")
		w.str(enumWords(a.Descriptor())[a-1]) // validated: defined
	}
	w.optUint("burst", r.Burst)
	w.field("match")
	w.WriteByte('{')
	for i, k := range sortedKeys(r.GetMatch()) {
		if i > 0 {
			w.WriteByte(',')
		}
		w.str(k)
		w.WriteByte(':')
		switch x := r.GetMatch()[k].GetKind().(type) {
		case *configv1.MatchValue_Equality:
			w.str(x.Equality)
		case *configv1.MatchValue_Regex:
			w.WriteString(`{"regex":`)
			w.str(x.Regex)
			w.WriteByte('}')
		case *configv1.MatchValue_OneOf:
			w.WriteString(`{"one_of":`)
			w.strings(x.OneOf.GetValues())
			w.WriteByte('}')
		}
	}
	w.WriteString("}}")
}

func (w *jsonWriter) optUint(name string, v *uint32) {
	if v != nil {
		w.field(name)
		w.WriteString(strconv.FormatUint(uint64(*v), 10))
	}
}

func (w *jsonWriter) strings(ss []string) {
	w.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			w.WriteByte(',')
		}
		w.str(s)
	}
	w.WriteByte(']')
}

// jsonSyntaxError is malformed JSON at a line and column.
type jsonSyntaxError struct {
	line, col int
	msg       string
}

func (e *jsonSyntaxError) Error() string { return fmt.Sprintf("%d:%d: %s", e.line, e.col, e.msg) }

// parseJSON reads strict JSON into YAML nodes with positions, so stored
// documents go through the same schema walk as the files. A valid document
// (json.Valid, which allocates nothing) is read by a scanner that can trust
// the grammar; an invalid one by encoding/json's tokenizer, whose messages
// the errors quote. Both give the same nodes (FuzzParseJSONPaths). A
// document that is not UTF-8 is refused before either reads it.
func parseJSON(data []byte) (*yaml.Node, error) {
	if err := notUTF8Text(data); err != nil {
		return nil, err
	}
	if json.Valid(data) {
		return newValidJSON(data).value(), nil
	}
	return parseJSONTokens(data)
}

func newValidJSON(data []byte) *validJSON {
	return &validJSON{data: data, text: string(data), p: jsonParser{data: data, atLine: 1, atCol: 1}}
}

// notUTF8Text refuses a document that is not UTF-8, naming its first bad
// byte, as the YAML reader refuses a file. encoding/json reads each bad
// byte as U+FFFD, so a stored document the writers never write (they write
// UTF-8 only, and refuse a match value that is not) was taken: a match
// value "a\xffb" written by hand matched "a\uFFFDb" instead.
func notUTF8Text(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	line, start := 1, 0
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return &jsonSyntaxError{line: line, col: utf8.RuneCount(data[start:i]) + 1,
				msg: fmt.Sprintf("invalid UTF-8 (byte 0x%02x; the document must be UTF-8 text)", data[i])}
		}
		if r == '\n' {
			line, start = line+1, i+1
		}
		i += size
	}
	return nil
}

// parseJSONTokens is parseJSON with encoding/json's tokenizer, for any input.
func parseJSONTokens(data []byte) (*yaml.Node, error) {
	p := &jsonParser{data: data, dec: json.NewDecoder(bytes.NewReader(data)), lines: []int{0}}
	p.dec.UseNumber()
	for i, c := range data {
		if c == '\n' {
			p.lines = append(p.lines, i+1)
		}
	}
	n, err := p.value()
	if err != nil {
		return nil, err
	}
	rest := p.data[p.dec.InputOffset():]
	if trimmed := bytes.TrimLeft(rest, " \t\r\n"); len(trimmed) > 0 {
		return nil, p.errorAt(int64(len(p.data)-len(trimmed)), "unexpected data after the document")
	}
	return n, nil
}

type jsonParser struct {
	data  []byte
	dec   *json.Decoder
	lines []int // offset of the start of each line
	// Tokens come in increasing offsets, so the position of each is counted
	// on from the previous one: one pass over the document in all. Counting
	// from the start of the line for every token was quadratic in the length
	// of a single-line document (800 rules took seconds).
	at, atLine, atCol int64
	depth             int // containers open at the token read
}

// maxDepth bounds how deeply containers nest in a document, as json.Valid
// and the YAML parser bound it. parseJSONTokens recurses once per level: an
// invalid stored document of 1 MiB of "[" took 270 MB of one goroutine's
// stack (a fatal stack overflow where the stack limit is 250 MB) and seconds
// to refuse.
const maxDepth = 10000

// start returns the offset of the next token.
func (p *jsonParser) start() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

// pos returns the line and column of off, which is never before the offset
// of the previous call: it counts only the runes in between.
func (p *jsonParser) pos(off int64) (int, int) {
	if off < p.at || p.atLine == 0 {
		line, col := p.lineCol(off)
		p.at, p.atLine, p.atCol = off, int64(line), int64(col)
		return line, col
	}
	// Token starts are ASCII, so counting runes between two of them is exact.
	seg := p.data[p.at:off]
	if nl := bytes.LastIndexByte(seg, '\n'); nl >= 0 {
		p.atLine += int64(bytes.Count(seg, []byte{'\n'}))
		p.atCol = 1
		seg = seg[nl+1:]
	}
	p.atCol += int64(utf8.RuneCount(seg))
	p.at = off
	return int(p.atLine), int(p.atCol)
}

// lineCol returns the line and column (in runes, from 1) of off.
func (p *jsonParser) lineCol(off int64) (int, int) {
	if off > int64(len(p.data)) {
		off = int64(len(p.data))
	}
	i := sort.Search(len(p.lines), func(i int) bool { return int64(p.lines[i]) > off }) // first line starting after off
	return i, utf8.RuneCount(p.data[p.lines[i-1]:off]) + 1
}

func (p *jsonParser) errorAt(off int64, msg string) error {
	line, col := p.lineCol(off)
	return &jsonSyntaxError{line: line, col: col, msg: msg}
}

func (p *jsonParser) token() (json.Token, *yaml.Node, error) {
	off := p.start()
	tok, err := p.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, nil, p.errorAt(off, se.Error()) // at the start of the bad token
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, p.errorAt(int64(len(p.data)), "unexpected end of the document")
		}
		return nil, nil, p.errorAt(off, err.Error())
	}
	line, col := p.pos(off)
	return tok, &yaml.Node{Line: line, Column: col}, nil
}

func (p *jsonParser) value() (*yaml.Node, error) {
	tok, n, err := p.token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' || t == '[' {
			if p.depth++; p.depth > maxDepth {
				return nil, p.errorAt(p.dec.InputOffset()-1, fmt.Sprintf("exceeded max depth of %d", maxDepth))
			}
			defer func() { p.depth-- }()
		}
		switch t {
		case '{':
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
			for p.dec.More() {
				k, err := p.value()
				if err != nil {
					return nil, err
				}
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, k, v)
			}
		case '[':
			n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
			for p.dec.More() {
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		default:
			return nil, p.errorAt(p.dec.InputOffset()-1, fmt.Sprintf("unexpected %q", t))
		}
		if _, _, err := p.token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!str", t
	case json.Number:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!int", t.String()
		if bytes.ContainsAny([]byte(t), ".eE") {
			n.Tag = "!!float"
		}
	case bool:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(t)
	case nil:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
	}
	return n, nil
}

// validJSON reads a document that json.Valid accepted: it checks nothing, and
// every value becomes the node encoding/json's tokens would give.
type validJSON struct {
	data     []byte
	text     string // data, copied once: the values read are cut from it
	i        int
	p        jsonParser      // positions only
	slab     []yaml.Node     // nodes are cut from here: one allocation for many
	slabs    []*[]yaml.Node  // every slab taken, for release
	kids     []*yaml.Node    // containers' children are cut from here
	kidSlabs []*[]*yaml.Node // every slab of children taken, for release
	stack    []*yaml.Node    // the children of the open containers
}

// slabNodes is the length of a node slab.
const slabNodes = 512

// nodeSlabs keeps the slabs of the stored documents read, for the next: the
// nodes are most of what reading one allocates, and none outlives the read.
var nodeSlabs = sync.Pool{New: func() any {
	s := make([]yaml.Node, slabNodes)
	return &s
}}

// node returns a new node from the slab.
func (s *validJSON) node() *yaml.Node {
	if len(s.slab) == 0 {
		p := nodeSlabs.Get().(*[]yaml.Node)
		s.slabs = append(s.slabs, p)
		s.slab = *p
	}
	n := &s.slab[0]
	s.slab = s.slab[1:]
	return n
}

// slabChildren is the length of a slab of children.
const slabChildren = 1024

// childSlabs keeps the slabs children are cut from, like nodeSlabs.
var childSlabs = sync.Pool{New: func() any {
	s := make([]*yaml.Node, slabChildren)
	return &s
}}

// children returns a copy of kids, cut from a slab of children (when they
// fit in one).
func (s *validJSON) children(kids []*yaml.Node) []*yaml.Node {
	if len(kids) > slabChildren {
		return append([]*yaml.Node(nil), kids...)
	}
	if len(s.kids) < len(kids) {
		p := childSlabs.Get().(*[]*yaml.Node)
		s.kidSlabs = append(s.kidSlabs, p)
		s.kids = *p
	}
	out := s.kids[:len(kids):len(kids)]
	copy(out, kids)
	s.kids = s.kids[len(kids):]
	return out
}

// release gives the slabs back for reuse. No node read may be used after.
func (s *validJSON) release() {
	for _, p := range s.slabs {
		clear(*p)
		nodeSlabs.Put(p)
	}
	for _, p := range s.kidSlabs {
		clear(*p)
		childSlabs.Put(p)
	}
	s.slabs, s.slab, s.kidSlabs, s.kids = nil, nil, nil, nil
}

func (s *validJSON) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
			continue
		}
		return
	}
}

// value reads the value at s.i.
func (s *validJSON) value() *yaml.Node {
	s.space()
	line, col := s.p.pos(int64(s.i))
	n := s.node()
	n.Kind, n.Line, n.Column = yaml.ScalarNode, line, col
	switch s.data[s.i] {
	case '{', '[':
		n.Kind, n.Tag = yaml.MappingNode, "!!map"
		end := byte('}')
		if s.data[s.i] == '[' {
			n.Kind, n.Tag, end = yaml.SequenceNode, "!!seq", ']'
		}
		s.i++
		s.space()
		base := len(s.stack)
		for s.data[s.i] != end {
			s.stack = append(s.stack, s.value())
			s.space()
			if n.Kind == yaml.MappingNode {
				s.i++ // ':'
				s.stack = append(s.stack, s.value())
				s.space()
			}
			if s.data[s.i] == ',' {
				s.i++
				s.space()
			}
		}
		s.i++
		if len(s.stack) > base { // the children, in a slice of their own size
			n.Content = s.children(s.stack[base:])
			clear(s.stack[base:])
			s.stack = s.stack[:base]
		}
	case '"':
		n.Tag, n.Value = "!!str", s.str()
	case 't':
		n.Tag, n.Value = "!!bool", "true"
		s.i += len("true")
	case 'f':
		n.Tag, n.Value = "!!bool", "false"
		s.i += len("false")
	case 'n':
		n.Tag, n.Value = "!!null", "null"
		s.i += len("null")
	default: // a number
		start := s.i
		for s.i < len(s.data) && strings.IndexByte("+-.eE0123456789", s.data[s.i]) >= 0 {
			s.i++
		}
		n.Tag, n.Value = "!!int", s.text[start:s.i]
		if strings.ContainsAny(n.Value, ".eE") {
			n.Tag = "!!float"
		}
	}
	return n
}

// str reads the string at s.i. A plain string (no escape, valid UTF-8, as
// stored documents are) is cut from s.text: reading allocates nothing for
// it, and the strings of the message read share one copy of the document
// (they are most of it). Others are unquoted by encoding/json, which replaces
// invalid UTF-8 exactly as its tokenizer does.
func (s *validJSON) str() string {
	start, escaped, bits := s.i, false, byte(0)
	// Bytes of multi-byte characters are never '"' or '\\': scan bytes.
	for s.i++; s.data[s.i] != '"'; s.i++ {
		c := s.data[s.i]
		bits |= c
		if c == '\\' {
			escaped = true
			s.i++ // the escaped byte, which may be '"'
		}
	}
	s.i++
	// ASCII (no byte with the high bit) is valid UTF-8.
	if body := s.text[start+1 : s.i-1]; !escaped && (bits < utf8.RuneSelf || utf8.ValidString(body)) {
		return body
	}
	var v string
	_ = json.Unmarshal(s.data[start:s.i], &v) // cannot fail: the document is valid
	return v
}
