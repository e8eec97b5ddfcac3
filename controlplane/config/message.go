package config

import (
	"errors"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// ParseMessage reads a YAML (or JSON) document into msg, a message of another
// schema built on this one's rules (a RuleList field, such as the rules
// service's override documents), and checks it as rate_limits.yaml is checked:
// protovalidate, then the hand-written checks of every rule list in msg. The
// limiter of a rule list is the `limiter` field of the nearest message holding
// it; when available is not nil that limiter must exist there, and its
// properties and skip allow-list apply. The rule lists of a message of
// another schema are per-request rules (the rules service's answers), which
// have no mode: one that sets it is refused, not ignored. Errors name file,
// line and rule; an invalid document is rejected whole.
func ParseMessage(file string, data []byte, msg proto.Message, available *AvailableLimiters) error {
	if err := conflictMarkers(file, data); err != nil {
		return err
	}
	d := newDoc(file)
	d.perRequest = perRequestSchema(msg)
	if d.decode(data, msg, parseYAML) {
		d.validate(msg)
		d.checkNested(msg.ProtoReflect(), nil, "", available)
	}
	return d.result(msg)
}

// ValidateMessage checks a message built in code, or read from a service or
// from Redis, exactly as ParseMessage checks a file (without lines).
func ValidateMessage(msg proto.Message, available *AvailableLimiters) error {
	d := newDoc("")
	d.perRequest = perRequestSchema(msg)
	d.validate(msg)
	d.checkNested(msg.ProtoReflect(), nil, "", available)
	return d.result(msg)
}

// ErrPerRequestMode is the problem of a per-request rule list (a rules
// service's document or answer) that sets a mode: a limiter's mode comes from
// rate_limits.yaml, the rule store or the application, and a limiter meant
// to be in shadow would silently enforce.
var ErrPerRequestMode = errors.New("mode has no effect on per-request rules: set a limiter's mode in rate_limits.yaml or the rule store")

// perRequestSchema reports whether msg is of another schema than this
// package's (whose rule lists are per-request rules, see ParseMessage).
func perRequestSchema(msg proto.Message) bool {
	return msg.ProtoReflect().Descriptor().ParentFile().Package() != configv1.File_ratelimit_config_v1_config_proto.Package()
}

// ValidateRuleList checks one limiter's per-request rule list (a rules
// service's answer) as a rate_limits.yaml entry is checked (protovalidate,
// unique names, RE2, and, when available is not nil, the limiter's existence,
// its properties and its skip allow-list), and refuses a mode
// (ErrPerRequestMode) as ParseMessage does.
func ValidateRuleList(limiter string, rules *configv1.RuleList, available *AvailableLimiters) error {
	if rules.GetMode() != configv1.Mode_MODE_UNSPECIFIED {
		return ErrPerRequestMode
	}
	return ValidatePublishRulesRequest(&configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{limiter: rules}}, available)
}

// checkNested runs checkRules on every RuleList inside m.
func (d *doc) checkNested(m protoreflect.Message, at path, limiter string, available *AvailableLimiters) {
	md := m.Descriptor()
	if fd := md.Fields().ByName("limiter"); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap() {
		limiter = m.Get(fd).String()
		if available != nil && available.Spec(limiter) == nil && rulecheck.ValidName(limiter) {
			d.check(at.field("limiter"), false, "%v", available.NoLimiter(limiter))
		}
	}
	if md.FullName() == ruleListName {
		if list, ok := m.Interface().(*configv1.RuleList); ok {
			var spec *configv1.LimiterSpec
			if available != nil && limiter != "" {
				spec = available.Spec(limiter)
			}
			d.checkRules(spec, at.field("rules"), list.GetRules())
			if d.perRequest && list.GetMode() != configv1.Mode_MODE_UNSPECIFIED {
				d.check(at.field("mode"), false, "%s", ErrPerRequestMode.Error())
			}
		}
		return
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := string(fd.Name())
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				d.checkNested(v.Message(), at.field(name).key(k.String()), limiter, available)
				return true
			})
		case fd.IsList():
			if fd.Kind() != protoreflect.MessageKind {
				continue
			}
			l := m.Get(fd).List()
			for j := 0; j < l.Len(); j++ {
				d.checkNested(l.Get(j).Message(), at.field(name).at(j), limiter, available)
			}
		case fd.Kind() == protoreflect.MessageKind && m.Has(fd):
			d.checkNested(m.Get(fd).Message(), at.field(name), limiter, available)
		}
	}
}
