package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
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

// TestRunOneNamesTimeout: the error of a run that outlasts the run
// timeout names it as Options.RunTimeoutArg says, or as --timeout and its
// value; a run the caller's ctx ended is not said to have outlasted it.
func TestRunOneNamesTimeout(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		opts Options
		want string
	}{
		{"flag", context.Background(), Options{RunTimeout: 20 * time.Millisecond},
			"the run outlasted --timeout 20ms: fake: context deadline exceeded"},
		{"arg", context.Background(), Options{RunTimeout: 20 * time.Millisecond, RunTimeoutArg: "--timeout 20ms (from ORDERLY_TIMEOUT)"},
			"the run outlasted --timeout 20ms (from ORDERLY_TIMEOUT): fake: context deadline exceeded"},
		{"cancelled", cancelled, Options{RunTimeout: 20 * time.Millisecond}, "fake: context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.opts.setDefaults(); err != nil {
				t.Fatal(err)
			}
			h := &harness{opts: tt.opts}
			con := fakeContender{func(ctx context.Context) (Result, error) {
				<-ctx.Done()
				return Result{}, fmt.Errorf("fake: %w", ctx.Err())
			}}
			if _, err := h.runOne(tt.ctx, con, RunSpec{}); err == nil || err.Error() != tt.want {
				t.Errorf("got error %v, want %q", err, tt.want)
			}
		})
	}
	o := Options{}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%v, --timeout's default", DefaultRunTimeout); o.RunTimeoutArg != want {
		t.Errorf("zero options: got RunTimeoutArg %q, want %q", o.RunTimeoutArg, want)
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

// TestIOCaseData: without --messages, an io case whose limit would finish
// the scenario's 30k messages in under ioRunLength gets a data set of Num
// x 2000 messages; with --messages every case shares the scenario's.
func TestIOCaseData(t *testing.T) {
	for _, tt := range []struct {
		messages int
		want     map[string]int // case -> its own messages (0: the scenario's)
	}{
		{0, map[string]int{"Num=8": 0, "Num=64": 128_000, "Num=256": 512_000}},
		{2000, map[string]int{"Num=8": 0, "Num=64": 0, "Num=256": 0}},
	} {
		o := Options{Messages: tt.messages}
		if err := o.setDefaults(); err != nil {
			t.Fatal(err)
		}
		s, err := o.scenario("io")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, c := range s.Cases {
			got[c.Label] = c.Messages
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("--messages %d: cases' own messages: got %v, want %v", tt.messages, got, tt.want)
		}
	}
}

// TestCaseOwnData runs a scenario one of whose cases has a data set of its
// own: its contenders consume that one (the databus port stops once it has
// handled what the data set holds, so a run on the wrong one either stops
// short or never ends), and the report lists it.
func TestCaseOwnData(t *testing.T) {
	var progress bytes.Buffer
	opts := Options{Rounds: 1, Progress: &progress}
	if err := opts.setDefaults(); err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := &harness{opts: opts, b: b, data: map[dataSpec]*dataset{}, rep: newReport(opts)}
	s := scenario{Name: "own", Data: dataSpec{Messages: 300, Partitions: 2, Keys: 10}, Contenders: []string{"databus"},
		Cases: []caseSpec{
			{Label: "shared", Num: 2, Size: 1, Ticker: -1, Baseline: "databus"},
			{Label: "own", Messages: 500, Num: 2, Size: 1, Ticker: -1, BaselineCase: "shared"},
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.runScenario(ctx, s); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	for _, want := range []string{"own shared round 1/1 databus: 300 msgs", "own own round 1/1 databus: 500 msgs"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress: want a line with %q\n%s", want, progress.String())
		}
	}
	if got := h.rep.Scenarios[0].CaseData; len(got) != 1 || got[0] != (CaseData{"own", 500}) {
		t.Errorf("report's case data: got %+v, want [{own 500}]", got)
	}
}
