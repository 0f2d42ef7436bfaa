package group

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
)

// Reliability scenario 6: a cluster of 3 brokers under load, with fetch
// errors injected, partition leaders moved and group coordinators moved.
// Nothing ends uncleanly, so nothing may be handled twice.

// newClusterRig is oracleRig on a cluster of brokers.
func newClusterRig(t *testing.T, name, topic string, partitions int32, brokers, n, keys int) (*rig, *oracle) {
	t.Helper()
	b, err := broker.Start(broker.Config{Brokers: brokers, Topics: []string{topic}, Partitions: partitions})
	if err != nil {
		t.Fatalf("start a cluster of %d brokers: %v", brokers, err)
	}
	t.Cleanup(b.Close)
	r := &rig{t: t, b: b, topic: topic, total: n, finished: map[int32]*offsets{}, commits: map[int32]int64{},
		plan: make([]planned, n), seqs: make([]uint32, n), counts: make([]uint32, keys)}
	for i := range r.plan {
		r.plan[i] = planned{key: uint32(i % keys), part: -1}
		r.seqs[i] = r.counts[i%keys]
		r.counts[i%keys]++
	}
	r.ledger = ledger.New(r.counts)
	o := newOracle(t, name, topic, r.counts)
	b.ObserveCommits(o.observe)
	return r, o
}

// fetchErrors are what a partition's fetch is answered with, in turn: a
// leader moving or missing, a broker's disk failing, a broker-side bug.
var fetchErrors = []*kerr.Error{kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.KafkaStorageError, kerr.UnknownServerError}

// TestScenario06Brokers: 3 brokers, 8 partitions, two members, 2500
// messages a second. Every 300 ms one of: the next fetches of a random
// partition answered with an error (two in a row, cycling through
// fetchErrors; sarama reports KAFKA_STORAGE_ERROR and UNKNOWN_SERVER_ERROR
// to Orderly, counted as Other, and retries each after its
// Consumer.Retry.Backoff, 2 s; it handles the leader errors itself), a random partition's leader moved to another broker, or
// every group coordinator moved (kfake rehashes them: the old one answers
// NOT_COORDINATOR). No loss, lane order, commits clean, and no duplicate.
func TestScenario06Brokers(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, brokers, rate, keys = 8, 3, 2500, 400
	d := scenarioDuration(8 * time.Second)
	r, o := newClusterRig(t, "6 three brokers: fetch errors, leaders and coordinators moved", "brokers", partitions, brokers, int(d.Seconds()*rate), keys)
	cluster := r.b.Cluster()
	// Which brokers the members' commits and fetches reach (CurrentNode is
	// valid inside a control function): they must follow the moves.
	var nodesMu sync.Mutex
	nodes := map[string]map[int32]int{"OffsetCommit": {}, "Fetch": {}}
	for _, k := range []kmsg.Key{kmsg.OffsetCommit, kmsg.Fetch} {
		name := k.Name()
		cluster.ControlKey(k.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			nodesMu.Lock()
			nodes[name][cluster.CurrentNode()]++
			nodesMu.Unlock()
			return nil, nil, false
		})
	}
	produced := r.produceAtRate(rate)
	cfg := r.config("brokers")
	cfg.Size, cfg.Num, cfg.Ticker = 8, 4, 5*time.Millisecond
	a, b := &member{tag: "a", o: o, delay: time.Millisecond}, &member{tag: "b", o: o, delay: time.Millisecond}
	stopA, stopB := a.start(t, cfg), b.start(t, cfg)
	waitFor(t, 30*time.Second, "both members to handle records", func() bool { return a.n.Load() > 0 && b.n.Load() > 0 })
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	var faults []*kfake.FaultHandle
	counts := map[string]int{}
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		p := int32(rng.IntN(partitions))
		switch i % 3 {
		case 0:
			e := fetchErrors[(i/3)%len(fetchErrors)]
			faults = append(faults, cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: r.topic, Partitions: []int32{p}, Err: e, Count: 2}))
			counts["fetch "+e.Message]++
		case 1:
			to := (cluster.LeaderFor(r.topic, p) + 1 + int32(rng.IntN(brokers-1))) % brokers
			if err := cluster.MoveTopicPartition(r.topic, p, to); err != nil {
				t.Fatalf("move the leader of %s/%d to broker %d: %v", r.topic, p, to, err)
			}
			counts["leader moved"]++
		case 2:
			before := cluster.CoordinatorFor(cfg.GroupID)
			cluster.RehashCoordinators()
			if cluster.CoordinatorFor(cfg.GroupID) != before {
				counts["coordinator moved"]++
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	produced()
	v := r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
	hits := 0
	for _, f := range faults {
		hits += f.Hits()
	}
	if hits == 0 || counts["leader moved"] == 0 || counts["coordinator moved"] == 0 {
		t.Errorf("faults that took effect: %d fetch errors answered, %v; want some of each", hits, counts)
	}
	nodesMu.Lock()
	for name, by := range nodes {
		if len(by) < 2 {
			t.Errorf("%s requests by broker: %v, want them at 2 brokers or more (following the moves)", name, by)
		}
	}
	reached := fmt.Sprint(nodes)
	nodesMu.Unlock()
	errsA, errsB := a.g.Load().Stats().ErrorsBy, b.g.Load().Stats().ErrorsBy
	for _, stop := range []func() error{stopA, stopB} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d fetch errors answered, %v; requests by broker %s; errors seen by the members: a %+v, b %+v; %d commits checked", hits, counts, reached, errsA, errsB, v.Commits)
}
