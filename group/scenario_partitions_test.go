package group

import (
	"fmt"
	"testing"
	"time"
)

// Reliability scenario 10: partitions added to a topic mid-run
// (CreatePartitions) are claimed after sarama's next metadata refresh and
// consumed from their start, while the old partitions go on.

// firstCompletion returns when the first record of partition p was
// handled, and the lowest offset handled then.
func (o *oracle) firstCompletion(p int32) (at time.Time, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, cs := range o.comps {
		if k.p != p {
			continue
		}
		for _, c := range cs {
			if !ok || c.at.Before(at) {
				at, ok = c.at, true
			}
		}
	}
	return at, ok
}

// TestScenario10PartitionsAdded: two members consume a topic of 4
// partitions under traffic; it grows to 8 (CreatePartitions) and records
// are written to the new partitions at once. Every new partition must be
// claimed and consumed from offset 0 within two metadata refresh periods
// (sarama's leader compares partition counts against its metadata cache
// once per Metadata.RefreshFrequency, and the cache is refreshed once per
// period) plus a rebalance. The default suite uses a 2 s period;
// ORDERLY_SOAK uses DefaultSarama's (DefaultMetadataRefresh).
func TestScenario10PartitionsAdded(t *testing.T) {
	t.Parallel() // mostly waiting on metadata refreshes
	const before, after, perOld, perNew, keysPer = 4, 8, 2500, 1000, 25
	refresh := 2 * time.Second
	if soak() {
		refresh = DefaultMetadataRefresh
	}
	// Keys are pinned to partitions (a key's partition by hash would
	// change with the count, and the oracle needs every key on one
	// partition): keysPer keys per partition, old keys first.
	var plan []planned
	for i := range perOld * before {
		k := i % (keysPer * before)
		plan = append(plan, planned{key: uint32(k), part: int32(k % before)})
	}
	firstHalf := len(plan) / 2
	for i := range perNew * (after - before) {
		k := keysPer*before + i%(keysPer*(after-before))
		plan = append(plan, planned{key: uint32(k), part: int32(before + k%(after-before))})
	}
	// Interleave the second half of the old records with the new ones.
	rest := append([]planned(nil), plan[firstHalf:perOld*before]...)
	news := plan[perOld*before:]
	mixed := make([]planned, 0, len(rest)+len(news))
	for i, j := 0, 0; i < len(rest) || j < len(news); {
		if i < len(rest) {
			mixed = append(mixed, rest[i])
			i++
		}
		if j < len(news) {
			mixed = append(mixed, news[j])
			j++
		}
	}
	plan = append(plan[:firstHalf:firstHalf], mixed...)

	r := newRigQuiet(t, "grow", before, plan)
	o := newOracle(t, "10 partitions added mid-run", r.topic, r.counts)
	r.b.ObserveCommits(o.observe)
	cfg := r.config("grow")
	cfg.Sarama.Metadata.RefreshFrequency = refresh
	cfg.Size, cfg.Num, cfg.Ticker = 8, 4, 5*time.Millisecond
	a, b := &member{tag: "a", o: o, delay: time.Millisecond}, &member{tag: "b", o: o, delay: time.Millisecond}
	stopA, stopB := a.start(t, cfg), b.start(t, cfg)
	// Both members claim before the first records arrive: one member
	// alone can handle them all before the other joins.
	waitFor(t, 30*time.Second, "both members to claim partitions", func() bool {
		held := func(m *member) (n int) {
			for p := range int32(before) {
				if g := m.g.Load(); g != nil && claimOf(g, r.topic, p) != nil {
					n++
				}
			}
			return n
		}
		na, nb := held(a), held(b)
		return na > 0 && nb > 0 && na+nb == before
	})
	r.produce(0, firstHalf)
	waitFor(t, 30*time.Second, "both members to handle records", func() bool { return a.n.Load() > 0 && b.n.Load() > 0 })

	if err := clusterAdmin(t, r.b.Addrs()).CreatePartitions(r.topic, after, nil, false); err != nil {
		t.Fatalf("CreatePartitions %s to %d: %v", r.topic, after, err)
	}
	grown := time.Now()
	r.produce(firstHalf, len(plan))
	limit := 2*refresh + 15*time.Second
	waitFor(t, limit+15*time.Second, "every new partition to be handled", func() bool {
		for p := int32(before); p < after; p++ {
			if _, ok := o.firstCompletion(p); !ok {
				return false
			}
		}
		return true
	})
	var slowest time.Duration
	took := map[int32]time.Duration{}
	for p := int32(before); p < after; p++ {
		at, _ := o.firstCompletion(p)
		took[p] = at.Sub(grown).Round(time.Millisecond)
		slowest = max(slowest, at.Sub(grown))
	}
	if slowest > limit {
		t.Errorf("new partitions first handled %v after CreatePartitions (%v), want within 2 refresh periods of %v and a rebalance (%v)", slowest, took, refresh, limit)
	}
	r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
	if got := a.g.Load().Stats().Partitions + b.g.Load().Stats().Partitions; got != after {
		t.Errorf("partitions claimed by the two members: got %d, want %d", got, after)
	}
	for _, stop := range []func() error{stopA, stopB} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("metadata refresh %v: new partitions first handled after %v (by partition: %s)", refresh, slowest.Round(time.Millisecond), fmt.Sprint(took))
}
