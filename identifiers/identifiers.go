package identifiers

import ratelimit "github.com/ratekit/ratekit/core"

// Well-known identifier properties. Rules match on and count by these names;
// using the constants keeps every adapter and every service spelling them the
// same way (docs/design.md#identifiers).
const (
	User          = "user"           // the authenticated principal, e.g. "user:123", or Anonymous
	IP            = "ip"             // the client IP (see TrustedProxies)
	Path          = "path"           // the raw request path; match on it, do not count by it
	Method        = "method"         // the HTTP method, e.g. "GET"
	Endpoint      = "endpoint"       // the route template, e.g. "GET /users/{id}", or Unmatched
	RequestType   = "request_type"   // the kind of traffic, e.g. "api", "web", "git"
	Namespace     = "namespace"      // the namespace (group or project) the request acts on
	RootNamespace = "root_namespace" // the top-level namespace, for per-tenant resource budgets
	NamespacePlan = "namespace_plan" // the namespace's plan, e.g. "premium"
	Project       = "project"        // the project the request acts on
	Service       = "service"        // the serving service's name
	GRPCService   = "grpc_service"   // the gRPC service, e.g. "grpc.health.v1.Health"
	GRPCMethod    = "grpc_method"    // the full gRPC method, e.g. "/grpc.health.v1.Health/Check"
	TaskType      = "task_type"      // the background task's type name
	Queue         = "queue"          // the background task's queue
)

// Anonymous is the user value of unauthenticated callers (= ratelimit.Anonymous).
// Its angle brackets keep it from colliding with any real user name.
const Anonymous = ratelimit.Anonymous

// Unmatched is the endpoint value of requests that matched no route. Like
// Anonymous it cannot collide with a real route template.
const Unmatched = "<unmatched>"

// EndpointOrUnmatched returns template, or Unmatched when it is empty.
func EndpointOrUnmatched(template string) string {
	if template == "" {
		return Unmatched
	}
	return template
}
