package conformance_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"log"
	"strings"

	"github.com/ratekit/ratekit/conformance"
)

// An SDK in another language reads the scenarios as files: each is a
// description, the limiter's rules and the steps with their expected
// results (README.md in this directory has the format).
func Example() {
	data, err := fs.ReadFile(conformance.Scenarios(), "limit_admits_exactly_limit.yaml")
	if err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		if key, _, ok := strings.Cut(sc.Text(), ":"); ok && !strings.HasPrefix(key, " ") {
			fmt.Println(key) // the top-level keys
		}
	}
	// Output:
	// description
	// rules
	// steps
}
