// Package copiertest tests the ratekit copier template (../copier-template)
// with the real copier, git and go tools: it publishes the template to a
// temporary git repository with publish.sh (tags v1.0.0 and v2.0.0, as the
// published template repository has), renders services with `copier copy
// --trust --defaults` for each framework alone and all together, and checks
// that each passes `ratekit validate` (the CLI built from this checkout),
// builds, passes its own generated tests and starts; it then updates a
// service from v1.0.0 to v2.0.0 with `copier update`, checking the new
// defaults, the migration and the survival of the service's own edits, and it
// checks that bad answers are refused.
//
// The package has no non-test code; its module keeps the template's tooling
// out of the root module. Requirements: copier 9 (python3 -m pip install
// 'copier>=9,<10'), git, go and make on PATH. The rendered services build
// against this checkout through the template's local-development answer
// (ratekit_path), so they need nothing but the Go module proxy.
package copiertest
