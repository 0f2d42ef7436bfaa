package bench

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeContender runs fn as its Run.
type fakeContender struct {
	fn func(ctx context.Context) (Result, error)
}

func (fakeContender) Name() string { return "fake" }
func (f fakeContender) Run(ctx context.Context, _ RunSpec) (Result, error) {
	return f.fn(ctx)
}

var errConnect = errors.New("connect failed")

// TestStallRunEndsEarly: a contender whose run ends before the stall is
// sampled (an error at once, say) makes the stall scenario return
// promptly, with the run's error. It used to wait for a second outcome
// that never came.
func TestStallRunEndsEarly(t *testing.T) {
	tests := []struct {
		name    string
		runErr  error
		wantErr []error
	}{
		{"run fails at once", errConnect, []error{errEndedEarly, errConnect}},
		{"run returns at once", nil, []error{errEndedEarly}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{opts: Options{RunTimeout: time.Minute, StallDuration: time.Minute, Progress: io.Discard}}
			con := fakeContender{func(context.Context) (Result, error) { return Result{}, tt.runErr }}
			done := make(chan error, 1)
			go func() {
				_, err := h.stallOne(context.Background(), con, RunSpec{MaxInFlight: 10})
				done <- err
			}()
			select {
			case err := <-done:
				for _, want := range tt.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("stallOne: got %v, want it to wrap %v", err, want)
					}
				}
			case <-time.After(5 * time.Second):
				t.Fatal("stallOne: still running 5s after the contender's run returned")
			}
		})
	}
}

func TestRoundOrder(t *testing.T) {
	abc := []string{"a", "b", "c"}
	tests := []struct {
		names []string
		round int
		want  []string
	}{
		{abc, 1, []string{"a", "b", "c"}},
		{abc, 2, []string{"b", "c", "a"}},
		{abc, 3, []string{"c", "a", "b"}},
		{abc, 4, []string{"a", "b", "c"}},
		{[]string{"a", "b"}, 2, []string{"b", "a"}},
		{[]string{"a"}, 5, []string{"a"}},
		{nil, 2, nil},
	}
	for _, tt := range tests {
		if got := roundOrder(tt.names, tt.round); !slices.Equal(got, tt.want) {
			t.Errorf("roundOrder(%v, %d) = %v, want %v", tt.names, tt.round, got, tt.want)
		}
	}
	if !slices.Equal(abc, []string{"a", "b", "c"}) {
		t.Errorf("roundOrder modified its input: %v", abc)
	}
}

// TestRunOneCollectsFirst: every timed run starts on a collected heap, so
// that it does not pay for the previous run's garbage.
func TestRunOneCollectsFirst(t *testing.T) {
	numGC := func() uint32 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.NumGC
	}
	h := &harness{opts: Options{RunTimeout: time.Minute}}
	before := numGC()
	var during uint32
	con := fakeContender{func(context.Context) (Result, error) {
		during = numGC()
		return Result{}, nil
	}}
	if _, err := h.runOne(context.Background(), con, RunSpec{}); err != nil {
		t.Fatal(err)
	}
	if during <= before {
		t.Errorf("GC cycles: got %d when the run started, want more than the %d before runOne", during, before)
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // in the error; "" for none
	}{
		{"zero", Options{}, ""},
		{"messages", Options{Messages: -1}, "--messages -1"},
		{"partitions", Options{Partitions: -8}, "--partitions -8"},
		{"keys", Options{Keys: -1}, "--keys -1"},
		{"rounds", Options{Rounds: -3}, "--rounds -3"},
		{"chan", Options{Chan: -1}, "--chan -1"},
		{"max-in-flight", Options{MaxInFlight: -1}, "--max-in-flight -1"},
		{"duration", Options{StallDuration: -time.Second}, "--duration -1s"},
		{"timeout", Options{RunTimeout: -time.Minute}, "--timeout -1m0s"},
		{"num", Options{Nums: []int{8, 0}}, "--num [8 0]"},
		{"contenders", Options{Contenders: []string{"kafka-streams"}}, "--contenders"},
		{"scenario", Options{Scenarios: []string{"nope"}}, "--scenario"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.setDefaults()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrOptions naming %q", err, tt.want)
			}
		})
	}
	o := Options{}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.Partitions != DefaultPartitions || o.Chan != DefaultChan || o.RunTimeout != DefaultRunTimeout ||
		o.StallDuration != DefaultStallDuration || !slices.Equal(o.Nums, DefaultNums) {
		t.Errorf("zero options: got %+v, want the defaults", o)
	}
}

func TestFormatCount(t *testing.T) {
	tests := []struct {
		n    float64
		want string
	}{
		{0, "0"},
		{500, "500"},
		{9999, "9999"},
		{12345, "12.3k"},
		{50000, "50.0k"},
		{99949, "99.9k"},
		{99950, "100k"},
		{999_400, "999k"},
		{999_600, "1.00M"},
		{1_234_567, "1.23M"},
		{12_345_678, "12.3M"},
		{123_456_789, "123M"},
	}
	for _, tt := range tests {
		if got := FormatCount(tt.n); got != tt.want {
			t.Errorf("FormatCount(%v) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestRoundDuration(t *testing.T) {
	tests := []struct {
		d, want time.Duration
	}{
		{1234567 * time.Nanosecond, 1230 * time.Microsecond},
		{987654 * time.Nanosecond, 988 * time.Microsecond},
		{1234567890 * time.Nanosecond, 1235 * time.Millisecond},
		{12345678901 * time.Nanosecond, 12350 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := RoundDuration(tt.d); got != tt.want {
			t.Errorf("RoundDuration(%v) = %v, want %v", tt.d, got, tt.want)
		}
	}
	if got := Seconds(1.5).Duration(); got != 1500*time.Millisecond {
		t.Errorf("Seconds(1.5).Duration() = %v, want 1.5s", got)
	}
}
