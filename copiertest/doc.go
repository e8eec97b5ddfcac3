// Package copiertest tests the ratekit copier template (../copier-template)
// with the real copier, git and go tools: it publishes the template to a
// temporary git repository with publish.sh (tags as the published template
// repository has), renders services with `copier copy --trust --defaults` for
// each framework alone and all together, and checks that each passes `ratekit
// validate` (the CLI built from this checkout), builds, passes its own
// generated tests and runs from another directory (available_limiters.yaml is
// built in), exporting OpenTelemetry to a loopback OTLP receiver; it updates a
// service from v1.0.0 to the current release with `copier update`, checking the
// new defaults, the migration and the survival of the service's own edits; it
// updates a tidied and committed service of the previous release (2.0.0, taken
// from this repository's git history) adding a framework, which must leave no
// conflict; and it checks that bad answers and bad publications are refused.
//
// The package has no non-test code; its module keeps the template's tooling
// out of the root module. Requirements: copier 9 (python3 -m pip install
// 'copier>=9,<10'), git (with this repository's history), go and make on
// PATH. The rendered services build against this checkout (ratekit_path,
// whose default publish.sh records), so they need nothing but the Go module
// proxy.
package copiertest
