// Package observability tests the Prometheus rules and the Grafana dashboard
// shipped in the repository's observability/ directory (and in the copier
// template) against what the examples really export: promtool checks and
// unit-tests the rules, and a real Prometheus scraping an example's internal
// listener evaluates them, the recorded series and the alerts included.
//
// The tests need Debian's prometheus package (prometheus and promtool); the
// test command installs it and sets RATEKIT_TEST_PROMETHEUS and
// RATEKIT_TEST_PROMTOOL, so that they never skip there.
package observability
