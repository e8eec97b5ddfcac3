// Package promtest reads the Prometheus series that the tests of several
// packages and modules check, and starts a real Prometheus server for the
// tests that query one (Start). Only tests import it.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter returns the value of the counter name whose labels include labels
// (the first such series g gathers), and whether there is one. A Gather
// error fails the test.
func Counter(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}
