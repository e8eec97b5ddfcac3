package debug

import (
	"testing"
	"time"
)

// Measured ages are rounded: "refreshed 20ms ago", never 19.821509ms.
func TestAgeRounded(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{19821509 * time.Nanosecond, "20ms"},
		{0, "0s"},
		{1234567890 * time.Nanosecond, "1.2s"},
		{42*time.Second + 400*time.Millisecond, "42.4s"},
		{90*time.Second + 600*time.Millisecond, "1m31s"},
		{2 * time.Hour, "2h"},
	} {
		if got := age(tt.d); got != tt.want {
			t.Errorf("age(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
