package broker

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/loadgen"
)

func TestCaughtUpTo(t *testing.T) {
	tests := []struct {
		name          string
		committed, hw map[int32]int64
		want          bool
	}{
		{"no partitions", nil, nil, false},
		{"no partitions, stray commits", map[int32]int64{0: 5}, map[int32]int64{}, false},
		{"all at the high watermark", map[int32]int64{0: 5, 1: 7}, map[int32]int64{0: 5, 1: 7}, true},
		{"one behind", map[int32]int64{0: 5, 1: 6}, map[int32]int64{0: 5, 1: 7}, false},
		{"empty partition without a commit", map[int32]int64{0: 5}, map[int32]int64{0: 5, 1: 0}, true},
		{"written partition without a commit", map[int32]int64{0: 5}, map[int32]int64{0: 5, 1: 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CaughtUpTo(tt.committed, tt.hw); got != tt.want {
				t.Errorf("CaughtUpTo(%v, %v) = %v, want %v", tt.committed, tt.hw, got, tt.want)
			}
		})
	}
}

// startWith starts a broker with topic "t" (2 partitions) holding n
// messages, and "empty" holding none.
func startWith(t *testing.T, n int) *Broker {
	t.Helper()
	b, err := Start(Config{Topics: []string{"t", "empty"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = loadgen.Produce(ctx, b.Addrs(), "t", n, func(i int) loadgen.Record {
		return loadgen.Record{Key: []byte{byte(i)}, Value: []byte("v")}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCaughtUp(t *testing.T) {
	b := startWith(t, 10)
	tests := []struct {
		topic string
		want  bool
	}{
		{"missing", false}, // misspelt or never created: nothing to catch up with
		{"empty", true},
		{"t", false},
	}
	for _, tt := range tests {
		if got := b.CaughtUp("g", tt.topic); got != tt.want {
			t.Errorf("CaughtUp(g, %s) = %v, want %v", tt.topic, got, tt.want)
		}
	}
}

var errConsumer = errors.New("consumer failed")

// untilCancelled is a consumer that does nothing until its context ends,
// then returns err.
func untilCancelled(err error) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		return err
	}
}

func TestWaitCaughtUp(t *testing.T) {
	b := startWith(t, 10)
	tests := []struct {
		name    string
		topic   string
		fn      func(context.Context) error
		wantErr []error // nil: no error
	}{
		{"caught up at once", "empty", untilCancelled(nil), nil},
		{"caught up, consumer error on stop", "empty", untilCancelled(errConsumer), []error{errConsumer}},
		{"missing topic", "missing", untilCancelled(nil), []error{ErrNotCaughtUp, context.DeadlineExceeded}},
		{"consumer fails at once", "t", func(context.Context) error { return errConsumer }, []error{ErrEndedEarly, errConsumer}},
		{"consumer returns at once", "t", func(context.Context) error { return nil }, []error{ErrEndedEarly}},
		{"timeout, consumer error on stop", "t", untilCancelled(errConsumer), []error{ErrNotCaughtUp, context.DeadlineExceeded, errConsumer}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Cases that end on the deadline wait 300 ms; the others get
			// room for a slow machine (they end as soon as they can).
			limit := 30 * time.Second
			if slices.Contains(tt.wantErr, context.DeadlineExceeded) {
				limit = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			err := b.WaitCaughtUp(ctx, "g", tt.topic, tt.fn)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if tt.wantErr != nil && err == nil {
				t.Fatalf("got nil, want an error wrapping %v", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("got %v, want it to wrap %v", err, want)
				}
			}
		})
	}
}

// TestWaitUntil: the condition is polled until it holds; the consumer's
// context is cancelled then, and only then.
func TestWaitUntil(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	polls := 0
	err := WaitUntil(ctx, func() bool { polls++; return polls == 3 }, func(ctx context.Context) error {
		<-ctx.Done()
		if polls < 3 {
			return errors.New("cancelled before the condition held")
		}
		return nil
	})
	if err != nil || polls != 3 {
		t.Errorf("got %v after %d polls, want nil after 3", err, polls)
	}
}

func TestStartBadAddr(t *testing.T) {
	for _, addr := range []string{"x", "127.0.0.1:99999", "127.0.0.1:port", ":9092"} {
		b, err := Start(Config{Addr: addr})
		if err == nil {
			b.Close()
		}
		if !errors.Is(err, ErrBadAddr) {
			t.Errorf("Start(Addr %q): got %v, want ErrBadAddr", addr, err)
		}
	}
}

// TestStartCannotListen: an Addr that parses but cannot be listened on (a
// port another listener holds, an address of no interface here) is
// ErrListen, naming the address once, without the data directory that is
// not the cause.
func TestStartCannotListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, addr := range []string{ln.Addr().String(), "192.0.2.1:0"} { // 192.0.2.0/24: TEST-NET-1, no host's
		b, err := Start(Config{Addr: addr})
		if err == nil {
			b.Close()
		}
		if !errors.Is(err, ErrListen) || strings.Count(err.Error(), addr) != 1 || strings.Contains(err.Error(), "data") {
			t.Errorf("Start(Addr %q): got %v, want ErrListen naming the address once", addr, err)
		}
	}
}

// TestLogStartOffsets: a DeleteRecords (sarama's ClusterAdmin, as `orderly
// dlq purge` sends it) moves the partition's log start offset.
func TestLogStartOffsets(t *testing.T) {
	b := startWith(t, 10)
	if got := b.LogStartOffsets("t"); !maps.Equal(got, map[int32]int64{0: 0, 1: 0}) {
		t.Fatalf("LogStartOffsets before: %v, want 0 for both", got)
	}
	hw := b.HighWatermarks("t")
	if hw[0] == 0 {
		t.Fatalf("high watermarks %v: partition 0 got nothing to delete", hw)
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	admin, err := sarama.NewClusterAdmin(b.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords("t", map[int32]int64{0: hw[0]}); err != nil {
		t.Fatal(err)
	}
	if got := b.LogStartOffsets("t"); got[0] != hw[0] || got[1] != 0 {
		t.Errorf("LogStartOffsets after deleting partition 0 up to %d: %v", hw[0], got)
	}
}

// TestTopicsReloaded: Topics lists the topics a broker reloaded from its
// DataDir beside those of Config.Topics, each with its partition count.
func TestTopicsReloaded(t *testing.T) {
	dir := t.TempDir()
	b, err := Start(Config{DataDir: dir, Topics: []string{"kept"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b, err = Start(Config{DataDir: dir, Topics: []string{"new"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := b.Topics(ctx)
	if want := map[string]int{"kept": 1, "new": 3}; err != nil || !maps.Equal(got, want) {
		t.Errorf("Topics after a restart on the DataDir: got %v, %v; want %v", got, err, want)
	}
}
