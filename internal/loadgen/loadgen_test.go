package loadgen

import "testing"

func TestFails(t *testing.T) {
	const n = 200_000
	tests := []struct {
		name     string
		rate     float64
		min, max float64 // accepted failure fraction
	}{
		{"never", 0, 0, 0},
		{"negative", -1, 0, 0},
		{"always", 1, 1, 1},
		{"one percent", 0.01, 0.009, 0.011},
		{"ten percent", 0.1, 0.097, 0.103},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fails := 0
			for i := range n {
				a := Fails(tt.rate, 7, int32(i%8), int64(i), 1)
				if b := Fails(tt.rate, 7, int32(i%8), int64(i), 1); a != b {
					t.Fatalf("Fails(%v, 7, %d, %d, 1): got %v then %v, want the same draw", tt.rate, i%8, i, a, b)
				}
				if a {
					fails++
				}
			}
			if got := float64(fails) / n; got < tt.min || got > tt.max {
				t.Errorf("failure fraction: got %.4f, want within [%v, %v]", got, tt.min, tt.max)
			}
		})
	}
}

// TestFailsDrawsIndependently: a retry, another seed or another partition
// is a fresh draw, not the same outcome again.
func TestFailsDrawsIndependently(t *testing.T) {
	const n, rate = 200_000, 0.1
	tests := []struct {
		name  string
		other func(i int) bool
	}{
		{"next attempt", func(i int) bool { return Fails(rate, 1, 0, int64(i), 2) }},
		{"other seed", func(i int) bool { return Fails(rate, 2, 0, int64(i), 1) }},
		{"other partition", func(i int) bool { return Fails(rate, 1, 1, int64(i), 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			both := 0
			for i := range n {
				if Fails(rate, 1, 0, int64(i), 1) && tt.other(i) {
					both++
				}
			}
			// Independent draws coincide on rate^2 of the calls: 2000.
			if both < 1700 || both > 2300 {
				t.Errorf("both failed on %d of %d calls, want about %d", both, n, int(n*rate*rate))
			}
		})
	}
}
