// Package rulesv1 is the generated Go of ratekit.rules.v1
// (proto/ratekit/rules/v1/rules.proto): the per-request rules service
// RulesService/GetRules, its messages, and the reference server's override
// documents. The rules are the config schema's configv1.Rule, so one decoder
// and one validator serve every tier.
//
// It lives in the remoterules module, not beside its .proto, because the gRPC
// stubs import google.golang.org/grpc and the root module never does.
// Regenerate with scripts/gen-proto.sh; do not edit the .pb.go files.
package rulesv1
