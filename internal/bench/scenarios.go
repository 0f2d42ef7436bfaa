package bench

import (
	"fmt"
	"slices"
	"time"
)

// Scenario names, in the order "all" runs them.
var ScenarioNames = []string{"noop", "io", "batch", "skew", "fail", "stall"}

// ContenderNames are the known contenders, in run order within the first
// round (see roundOrder).
var ContenderNames = []string{"raw", "franz", "databus", "limit", "orderly"}

// workContenders is the default set of the scenarios with simulated work:
// franz, like raw one goroutine per partition, adds nothing there that raw
// does not show (ask for it with --contenders).
var workContenders = []string{"raw", "databus", "limit", "orderly"}

// newContender returns the named contender.
func newContender(name string) (Contender, error) {
	switch name {
	case "raw":
		return Raw{}, nil
	case "franz":
		return Franz{}, nil
	case "databus":
		return Databus{}, nil
	case "limit":
		return Limit{}, nil
	case "orderly":
		return &Orderly{}, nil
	}
	return nil, fmt.Errorf("unknown contender %q (known: %v)", name, ContenderNames)
}

// Defaults for Options' zero fields and the scenarios' sizes.
const (
	DefaultPartitions    = 8
	DefaultKeys          = 10000
	DefaultRounds        = 3
	DefaultChan          = 1024
	DefaultMaxInFlight   = 10000
	DefaultStallDuration = 60 * time.Second
	DefaultRunTimeout    = 5 * time.Minute
	// IOCost is the simulated I/O per message of the io, skew and fail
	// scenarios.
	IOCost = time.Millisecond
)

// DefaultNums are the io scenario's Num values.
var DefaultNums = []int{8, 64, 256}

// ioRunLength is how long, at least, each io case's data set lasts at the
// sleep limit (Num messages per IOCost), so that the start and the end of
// a run (the first fetch, the last calls) do not decide its ratio.
const ioRunLength = 2 * time.Second

// ioMessages is the data set of the io case with num workers: ioRunLength
// at the sleep limit, and at least the scenario's default.
func ioMessages(num, def int) int {
	return max(def, num*int(ioRunLength/IOCost))
}

// caseSpec is one configuration of a scenario, run by every contender.
type caseSpec struct {
	Label string
	// Messages, if above 0, gives the case a data set of its own of that
	// many messages (the scenario's partitions and keys), shared by its
	// contenders; 0: the scenario's.
	Messages int
	Num      int
	Size     int
	Ticker   time.Duration
	Work     Work
	// Baseline names the row this case's rows are compared with: a
	// contender of the same case ("raw", "limit", the pseudo contender
	// "cap"), or, with BaselineCase, the same contender in another case.
	Baseline     string
	BaselineCase string
	// Target is the moonshot for orderly's ratio (0: none).
	Target float64
}

// scenario is a data set and the cases run on it.
type scenario struct {
	Name       string
	Data       dataSpec
	Cases      []caseSpec
	Contenders []string // default set
	Note       string
}

// scenarios builds the named scenario from the options.
func (o *Options) scenario(name string) (scenario, error) {
	data := func(defMessages int, zipf float64) dataSpec {
		n := defMessages
		if o.Messages > 0 {
			n = o.Messages
		}
		return dataSpec{Messages: n, Partitions: o.Partitions, Keys: o.Keys, Zipf: zipf}
	}
	io1 := Work{PerCall: IOCost}
	switch name {
	case "noop":
		return scenario{
			Name: name, Data: data(1_000_000, 0),
			Cases: []caseSpec{{Label: "Size=1024 Num=8", Num: 8, Size: 1024, Ticker: -1,
				Baseline: "raw", Target: 0.95}},
			Contenders: []string{"raw", "franz", "databus", "orderly"},
			Note:       "no-op handler; limit is not meaningful without work",
		}, nil
	case "io":
		const def = 30_000
		s := scenario{Name: name, Data: data(def, 0), Contenders: workContenders,
			Note: fmt.Sprintf("1 ms simulated I/O per message, Size=1; without --messages, a Num whose limit would finish %d messages in under %v gets a data set of Num x %d messages; raw runs one goroutine per partition whatever Num is (measured once per round, on the first case's data)",
				def, ioRunLength, int(ioRunLength/IOCost))}
		for _, n := range o.Nums {
			c := caseSpec{Label: fmt.Sprintf("Num=%d", n), Num: n, Size: 1, Ticker: -1, Work: io1, Baseline: "limit"}
			if n == 64 || n == 256 {
				c.Target = 0.95
			}
			if m := ioMessages(n, def); o.Messages == 0 && m > def {
				c.Messages = m
			}
			s.Cases = append(s.Cases, c)
		}
		return s, nil
	case "batch":
		w := Work{PerCall: 2 * time.Millisecond, PerItem: 20 * time.Microsecond}
		return scenario{
			Name: name, Data: data(30_000, 0), Contenders: workContenders,
			Cases: []caseSpec{{Label: "Size=100 Num=4", Num: 4, Size: 100, Ticker: -1, Work: w, Baseline: "limit"}},
			Note:  "batch insert: 2 ms per call + 20 µs per message; raw calls it once per message",
		}, nil
	case "skew":
		return scenario{
			Name: name, Data: data(30_000, 1.1), Contenders: workContenders,
			Cases: []caseSpec{{Label: "Zipf s=1.1 Num=64", Num: 64, Size: 1, Ticker: -1, Work: io1,
				Baseline: "cap", Target: 0.95}},
			Note: "1 ms per message, Size=1; cap = messages / (hottest key's messages x 1 ms), also with the measured cost of a 1 ms sleep; limit ignores key order",
		}, nil
	case "fail":
		f := io1
		f.FailRate = 0.01
		return scenario{
			Name: name, Data: data(30_000, 0), Contenders: []string{"databus", "limit", "orderly"},
			Cases: []caseSpec{
				{Label: "0% Num=64", Num: 64, Size: 1, Ticker: -1, Work: io1, Baseline: "limit"},
				{Label: "1% Num=64", Num: 64, Size: 1, Ticker: -1, Work: f, BaselineCase: "0% Num=64", Target: 0.9},
			},
			Note: "1% of calls fail; orderly retries after 1 ms (Retry.Backoff), databus/limit (and raw, if asked for) retry inline at once",
		}, nil
	case "stall":
		n := 10 * o.MaxInFlight
		if o.Messages > 0 {
			n = o.Messages
		}
		return scenario{
			Name: name, Data: dataSpec{Messages: n, Partitions: o.Partitions, Keys: o.Keys},
			Cases: []caseSpec{{Label: fmt.Sprintf("MaxInFlight=%d", o.MaxInFlight), Num: 8, Size: 1024,
				Ticker: -1, Work: Work{Stall: true}}},
			Contenders: []string{"orderly"},
			Note:       "handler blocks until the run ends; process memory, broker included",
		}, nil
	}
	return scenario{}, fmt.Errorf("unknown scenario %q (known: all, %v)", name, ScenarioNames)
}

// contenders picks the scenario's contenders: its defaults, or the
// options' list where it names them.
func (o *Options) contenders(s scenario) []string {
	if len(o.Contenders) == 0 {
		return s.Contenders
	}
	var out []string
	for _, name := range ContenderNames {
		if slices.Contains(o.Contenders, name) && (name != "limit" || slices.Contains(s.Contenders, "limit")) {
			out = append(out, name)
		}
	}
	return out
}
