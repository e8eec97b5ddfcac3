package ratelimit

import "time"

// PerPeriod returns a limit rule named name that admits n requests per fixed
// window of period for each combination of the characteristics' values (one
// counter for everyone when none are given). It is shorthand for the Rule
// literal, which stays the way to set Match, BanFor, a log action and the
// other fields; the result may be edited like any Rule:
//
//	r := ratelimit.PerMinute("sign_in_by_ip", 5, "ip")
//	r.BanFor = 15 * time.Minute
func PerPeriod(name string, n int64, period time.Duration, characteristics ...string) Rule {
	return Rule{
		Name:            name,
		Characteristics: characteristics,
		Limit:           Static(n),
		Period:          StaticPeriod(period),
		Action:          ActionLimit,
	}
}

// PerSecond returns PerPeriod(name, n, time.Second, characteristics...).
func PerSecond(name string, n int64, characteristics ...string) Rule {
	return PerPeriod(name, n, time.Second, characteristics...)
}

// PerMinute returns PerPeriod(name, n, time.Minute, characteristics...).
func PerMinute(name string, n int64, characteristics ...string) Rule {
	return PerPeriod(name, n, time.Minute, characteristics...)
}

// PerHour returns PerPeriod(name, n, time.Hour, characteristics...).
func PerHour(name string, n int64, characteristics ...string) Rule {
	return PerPeriod(name, n, time.Hour, characteristics...)
}
