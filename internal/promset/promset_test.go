package promset_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekit/ratekit/internal/promset"
)

// A registry that holds a Set exposes every collector of the set.
func TestSetExposesEveryCollector(t *testing.T) {
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "promset_a_total", Help: "a"})
	b := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "promset_b", Help: "b"}, []string{"l"})
	a.Add(2)
	b.WithLabelValues("x").Set(3)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promset.Set{a, b})
	want := `
# HELP promset_a_total a
# TYPE promset_a_total counter
promset_a_total 2
# HELP promset_b b
# TYPE promset_b gauge
promset_b{l="x"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
