package adapter

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
)

func TestMeterAccumulates(t *testing.T) {
	ctx, m := WithMeter(context.Background())
	if MeterFrom(ctx) != m {
		t.Fatal("MeterFrom does not return the meter WithMeter installed")
	}
	AddCost(ctx, "db_duration_s", 0.012)
	AddCost(ctx, "db_duration_s", 0.5)
	AddCost(ctx, "gitaly_calls", 2)
	if got := m.Value("db_duration_s"); math.Abs(got-0.512) > 1e-12 {
		t.Errorf("db_duration_s = %v, want 0.512", got)
	}
	if got := m.Value("gitaly_calls"); got != 2 {
		t.Errorf("gitaly_calls = %v, want 2", got)
	}
	if got := m.Value("absent"); got != 0 {
		t.Errorf("absent = %v, want 0", got)
	}
	vals := m.Values()
	vals["gitaly_calls"] = 99 // a copy: must not change the meter
	if got := m.Value("gitaly_calls"); got != 2 {
		t.Errorf("Values is not a copy: gitaly_calls = %v", got)
	}
}

func TestMeterIgnoresBadValues(t *testing.T) {
	ctx, m := WithMeter(context.Background())
	for _, v := range []float64{-1, 0, math.NaN(), math.Inf(1), math.Inf(-1)} {
		AddCost(ctx, "x", v)
	}
	AddCost(ctx, "x", 1.5)
	if got := m.Value("x"); got != 1.5 {
		t.Errorf("x = %v, want 1.5 (bad values must be ignored)", got)
	}
}

// TestMeterSumStaysFinite: two finite costs whose sum overflows leave the
// largest finite cost, not +Inf, which would fail the charge open (a
// resource limiter would never count the request that spent the most).
func TestMeterSumStaysFinite(t *testing.T) {
	ctx, m := WithMeter(context.Background())
	AddCost(ctx, "x", math.MaxFloat64)
	AddCost(ctx, "x", math.MaxFloat64)
	if got := m.Value("x"); got != math.MaxFloat64 {
		t.Errorf("x = %v, want math.MaxFloat64", got)
	}
	if got := m.Values()["x"]; got != math.MaxFloat64 {
		t.Errorf("Values()[x] = %v, want math.MaxFloat64", got)
	}
}

func TestMeterAbsentAndNil(t *testing.T) {
	ctx := context.Background()
	AddCost(ctx, "x", 1) // no meter: a no-op, no panic
	if MeterFrom(ctx) != nil {
		t.Fatal("MeterFrom of a bare context is not nil")
	}
	var m *Meter
	m.Add("x", 1)
	if m.Value("x") != 0 || len(m.Values()) != 0 {
		t.Error("nil meter reports values")
	}
}

func TestWithMeterNestedSharesMeter(t *testing.T) {
	outer, m1 := WithMeter(context.Background())
	inner, m2 := WithMeter(outer)
	if m1 != m2 || inner != outer {
		t.Fatal("nested WithMeter created a second meter; the outer one would miss additions")
	}
	AddCost(inner, "x", 3)
	if m1.Value("x") != 3 {
		t.Errorf("outer meter x = %v, want 3", m1.Value("x"))
	}
}

func TestMeterConcurrent(t *testing.T) {
	ctx, m := WithMeter(context.Background())
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				AddCost(ctx, "n", 1)
				_ = m.Value("n")
			}
		}()
	}
	wg.Wait()
	if got := m.Value("n"); got != 8000 {
		t.Errorf("n = %v, want 8000", got)
	}
}

func ExampleAddCost() {
	ctx, m := WithMeter(context.Background())
	// A database wrapper deep in the call stack reports what it spent:
	AddCost(ctx, "db_duration_s", 0.012)
	AddCost(ctx, "db_duration_s", 0.030)
	fmt.Printf("%.3f\n", m.Value("db_duration_s"))
	// Output: 0.042
}
