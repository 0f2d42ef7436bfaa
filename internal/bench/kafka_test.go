package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
)

// testData starts a broker and produces spec's data set on it.
func testData(t *testing.T, spec dataSpec) (*broker.Broker, *dataset) {
	t.Helper()
	b, err := broker.Start(broker.Config{})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ds, err := produce(ctx, b, spec)
	if err != nil {
		t.Fatal(err)
	}
	return b, ds
}

func testSpec(b *broker.Broker, ds *dataset, group string) RunSpec {
	return RunSpec{
		Addrs: b.Addrs(), Topic: ds.Topic, GroupID: group,
		Expected: ds.Messages, Num: 4, Size: 16, Chan: 64, Ticker: -1,
	}
}

// runContender runs c once with a 30 s limit and checks that it handled
// everything.
func runContender(t *testing.T, c Contender, spec RunSpec) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Run(ctx, spec)
	if err != nil {
		t.Fatalf("%s: %v", c.Name(), err)
	}
	if r.Handled != int64(spec.Expected) {
		t.Fatalf("%s handled %d, want %d", c.Name(), r.Handled, spec.Expected)
	}
	if r.Elapsed <= 0 || r.Total < r.Elapsed {
		t.Errorf("%s: elapsed %v, total %v", c.Name(), r.Elapsed, r.Total)
	}
	return r
}

// checkCommitted checks that group committed every partition up to its
// high watermark.
func checkCommitted(t *testing.T, b *broker.Broker, group, topic string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !b.CaughtUp(group, topic); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("group %s committed %v, want the high watermarks %v", group, b.Committed(group, topic), b.HighWatermarks(topic))
		}
	}
}

func TestDatabusPort(t *testing.T) {
	b, ds := testData(t, dataSpec{Messages: 2000, Partitions: 4, Keys: 50})
	type seen struct {
		partition int32
		offset    int64
	}
	var (
		mu      sync.Mutex
		got     = map[seen]int{}
		lastOff = map[string]int64{} // per key
		batches int
		errs    []string
	)
	spec := testSpec(b, ds, "databus-port")
	spec.Work = Work{PerItem: 20 * time.Microsecond}
	db := Databus{observe: func(msgs []any) {
		mu.Lock()
		defer mu.Unlock()
		batches++
		if len(msgs) > spec.Size {
			errs = append(errs, "batch larger than Size")
		}
		for _, o := range msgs {
			m := o.(*dbInput).msg
			got[seen{m.Partition, m.Offset}]++
			if prev, ok := lastOff[string(m.Key)]; ok && prev >= m.Offset {
				errs = append(errs, "key "+string(m.Key)+" out of order")
			}
			lastOff[string(m.Key)] = m.Offset
		}
	}}
	runContender(t, db, spec)
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %s", len(errs), errs[0])
	}
	if len(got) != ds.Messages {
		t.Fatalf("Do saw %d distinct messages, want %d", len(got), ds.Messages)
	}
	for k, n := range got {
		if n != 1 {
			t.Fatalf("message %v handled %d times", k, n)
		}
	}
	if batches >= ds.Messages {
		t.Errorf("%d Do calls for %d messages: no batching", batches, ds.Messages)
	}
	checkCommitted(t, b, spec.GroupID, ds.Topic)
}

func TestDatabusStopsWhenStalled(t *testing.T) {
	b, ds := testData(t, dataSpec{Messages: 500, Partitions: 2, Keys: 10})
	spec := testSpec(b, ds, "databus-stall")
	spec.Work = Work{Stall: true}
	spec.UntilCancel = true
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r, err := Databus{}.Run(ctx, spec)
	if err != nil {
		t.Fatalf("stalled run ending with its context: %v", err)
	}
	if r.Handled != 0 {
		t.Errorf("a stalled handler handled %d", r.Handled)
	}
}

func TestRawAndLimit(t *testing.T) {
	b, ds := testData(t, dataSpec{Messages: 2000, Partitions: 4, Keys: 50})
	spec := testSpec(b, ds, "raw")
	spec.Work = Work{PerItem: 10 * time.Microsecond, FailRate: 0.05}
	r := runContender(t, Raw{}, spec)
	if r.Failed == 0 {
		t.Error("raw: no failed calls at a 5% failure rate")
	}
	checkCommitted(t, b, spec.GroupID, ds.Topic)
	runContender(t, Limit{}, spec)

	// A run cut short is an error naming how far it got.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	spec.GroupID = "raw-cancelled"
	if _, err := (Raw{}).Run(ctx, spec); err == nil || !strings.Contains(err.Error(), "handled") {
		t.Errorf("cancelled raw run: %v, want an error saying how many were handled", err)
	}
}

func TestProduceCountsTheHottestKey(t *testing.T) {
	_, ds := testData(t, dataSpec{Messages: 3000, Partitions: 4, Keys: 1000, Zipf: 1.1})
	// Zipf(1.1) over 1000 keys puts about 19% on the hottest key.
	if s := ds.HotShare(); s < 0.12 || s > 0.26 {
		t.Errorf("hottest key share %.3f, want about 0.19", s)
	}
	if ds.HotKey != "key-00000" {
		t.Errorf("hottest key %q, want key-00000", ds.HotKey)
	}
}

func TestOrderlyContender(t *testing.T) {
	b, ds := testData(t, dataSpec{Messages: 2000, Partitions: 4, Keys: 50})
	spec := testSpec(b, ds, "orderly")
	spec.Work = Work{PerItem: 10 * time.Microsecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := (&Orderly{}).Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if r.Handled != int64(ds.Messages) {
		t.Fatalf("handled %d, want %d", r.Handled, ds.Messages)
	}
	checkCommitted(t, b, spec.GroupID, ds.Topic)
}
