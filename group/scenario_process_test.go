package group

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/proctest"
)

// Reliability scenarios with real processes and kill -9: consumer
// processes churned against `orderly broker --data` (3), the broker
// process itself killed and restarted (4), and a consumer parking and
// dead-lettering on disk killed (11).

// caughtUp reports whether commits hold every partition of topic at its
// high watermark.
func caughtUp(client sarama.Client, admin sarama.ClusterAdmin, group, topic string) (bool, map[int32]int64) {
	c, err := brokerCommits(admin, group, topic)
	if err != nil {
		return false, nil
	}
	parts, err := client.Partitions(topic)
	if err != nil || len(parts) == 0 {
		return false, nil
	}
	final := map[int32]int64{}
	ok := true
	for _, p := range parts {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return false, nil
		}
		final[p] = c[p].Offset
		ok = ok && c[p].Offset == hw
	}
	return ok, final
}

// testClient is a sarama client on addrs, closed at the end of the test.
func testClient(t *testing.T, addrs []string) sarama.Client {
	t.Helper()
	sc := DefaultSarama()
	sc.ClientID = "orderly-test"
	c, err := sarama.NewClient(addrs, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitCaughtUp waits until group's commits reach the high watermarks and
// returns them.
func waitCaughtUp(t *testing.T, client sarama.Client, admin sarama.ClusterAdmin, group, topic string, timeout time.Duration) map[int32]int64 {
	t.Helper()
	var final map[int32]int64
	waitFor(t, timeout, "the committed offsets to reach the high watermarks", func() bool {
		var ok bool
		ok, final = caughtUp(client, admin, group, topic)
		return ok
	})
	return final
}

// TestScenario03ProcessChurn: `orderly broker --data DIR` and three
// consumer processes (static members, Config.InstanceID c0..c2), one of
// them killed with SIGKILL every 0.4-0.8 s (ORDERLY_SOAK: 2-4 s) and
// started again at once (same InstanceID), 20 times (ORDERLY_SOAK: one
// kill per 3 s of it), under 2000 messages a second that last until the
// churn ends. Static membership is what makes this meaningful on the
// embedded broker: a restarted instance replaces its killed member at
// once, where a dynamic one would leave a dead member behind for the
// session timeout and, with kfake's coordinator, sometimes wedge the
// group (see internal/wedge). Every duplicate must be of a message a
// killed process finished and the commits did not cover when it died.
func TestScenario03ProcessChurn(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const topic, group, partitions, keys, rate, consumers = "churn", "churn", 8, 400, 2000, 3
	kills, minGap, spread := 20, 400*time.Millisecond, 400*time.Millisecond
	if soak() {
		minGap, spread = 2*time.Second, 2*time.Second
		kills = max(int(scenarioDuration(0)/(3*time.Second)), 20)
	}
	gap := func() time.Duration { return minGap + rand.N(spread) }
	bin := proctest.BuildOrderly(t)
	dir := t.TempDir()
	brokerP, addr := brokerProc(t, bin, "127.0.0.1:0", filepath.Join(dir, "data"), topic, partitions)
	addrs := []string{addr}
	// Traffic for the first join (2 s) and the churn (each kill and
	// restart takes about 50 ms beyond its gap).
	churnFor := 2*time.Second + time.Duration(kills)*(minGap+spread/2+50*time.Millisecond)
	n := int(churnFor.Seconds() * rate)
	plan, seqs, counts := planOf(n, keys)
	o := newOracle(t, "3 processes, SIGKILL churn", topic, counts)
	produced := producePlan(t, addrs, topic, plan, seqs, nil, rate)
	admin, client := clusterAdmin(t, addrs), testClient(t, addrs)
	stopSampling := sampleCommits(t, o, admin, group)

	type slot struct {
		p   *proctest.Proc
		tag string
		log string
	}
	var slots [consumers]slot
	var all []slot
	started := 0
	start := func(i int) {
		tag := fmt.Sprintf("c%d-%d", i, started)
		started++
		s := slot{tag: tag, log: filepath.Join(dir, tag+".log")}
		s.p = startScenarioChild(t, childOpts{brokers: addrs, topic: topic, group: group, log: s.log, tag: tag, instance: fmt.Sprintf("c%d", i)})
		slots[i] = s
		all = append(all, s)
	}
	for i := range consumers {
		start(i)
	}
	time.Sleep(2 * time.Second) // the first join
	churn := time.Now()
	for range kills {
		time.Sleep(gap())
		i := rand.IntN(consumers)
		slots[i].p.Stop(syscall.SIGKILL)
		commits, err := brokerCommits(admin, group, topic)
		if err != nil {
			t.Fatalf("reading the commits after a kill: %v", err)
		}
		o.uncleanEnd(slots[i].tag, commits)
		start(i)
	}
	churned := time.Since(churn)
	produced()
	final := waitCaughtUp(t, client, admin, group, topic, 2*time.Minute)
	caught := time.Since(churn) - churned
	for _, s := range slots {
		waitReady(t, s.log)
		s.p.Stop(syscall.SIGTERM)
	}
	var logs []childLog
	for _, s := range all {
		if s.p.Cmd.ProcessState != nil && !s.p.Cmd.ProcessState.Success() && s.p.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("consumer %s exited with %v (see %s.stderr)", s.tag, s.p.Cmd.ProcessState, s.log)
		}
		logs = append(logs, readChildLog(t, s.tag, s.log))
	}
	feedLogs(o, logs)
	stopSampling()
	o.check(addrs, final, want{all: true, duplicates: true, deleted: 0})
	brokerP.Stop(syscall.SIGTERM)
	t.Logf("%d kills in %v, %d consumer processes in all; all committed %v after the last kill", kills, churned.Round(100*time.Millisecond), len(all), caught.Round(100*time.Millisecond))
}

// TestScenario04BrokerKill: two in-process members consume a backlog from
// `orderly broker --data DIR`, which is killed with SIGKILL twice mid-run
// (ORDERLY_SOAK: once per 10 s of it) and started again on the same data
// and port. Nothing acknowledged is lost by the broker (every produced
// record is readable after), nothing is lost by the consumers, and a
// repeat is only of what a member finished in the generation the broker
// died under and the commits the broker held then did not cover.
func TestScenario04BrokerKill(t *testing.T) {
	t.Parallel() // waits on processes and timers mostly: runs beside the others
	const topic, group, partitions, keys = "broker-kill", "broker-kill", 4, 200
	kills := 2
	if soak() {
		kills = max(int(scenarioDuration(0)/(10*time.Second)), 2)
	}
	n := 15_000 * kills
	bin := proctest.BuildOrderly(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	brokerP, addr := brokerProc(t, bin, "127.0.0.1:0", data, topic, partitions)
	addrs := []string{addr}
	plan, seqs, counts := planOf(n, keys)
	o := newOracle(t, "4 broker process SIGKILLed and restarted", topic, counts)
	producePlan(t, addrs, topic, plan, seqs, nil, 0)()
	admin, client := clusterAdmin(t, addrs), testClient(t, addrs)
	stopSampling := sampleCommits(t, o, admin, group)
	cfg := fastConfig(t, addrs, topic, group)
	cfg.Size, cfg.Num = 8, 2
	members := []*member{{tag: "a", o: o, delay: 5 * time.Millisecond}, {tag: "b", o: o, delay: 5 * time.Millisecond}}
	var stops []func() error
	for _, m := range members {
		stops = append(stops, m.start(t, cfg))
	}
	handled := func() (sum int64) {
		for _, m := range members {
			sum += m.n.Load()
		}
		return sum
	}
	var downFor []time.Duration
	for i := range kills {
		at := int64(n * (i + 1) / (kills + 2))
		waitFor(t, time.Minute, fmt.Sprintf("%d messages handled", at), func() bool { return handled() >= at })
		commits, err := brokerCommits(admin, group, topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			// Their final commits may not reach a dead broker: what they
			// finish in this generation may be repeated, not later.
			o.uncleanEndGen(m.tag, memberGen(m.g.Load(), topic, partitions), commits)
		}
		brokerP.Stop(syscall.SIGKILL)
		killed := time.Now()
		time.Sleep(time.Second)
		brokerP, _ = brokerProc(t, bin, addr, data, topic, partitions)
		downFor = append(downFor, time.Since(killed))
	}
	final := waitCaughtUp(t, client, admin, group, topic, 2*time.Minute)
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Errorf("member Run: %v", err)
		}
	}
	stopSampling()
	o.check(addrs, final, want{all: true, duplicates: true, deleted: 0})
	var errs int64
	for _, m := range members {
		errs += m.g.Load().Stats().Errors
	}
	brokerP.Stop(syscall.SIGTERM)
	t.Logf("the broker was down %v; %d consumer errors retried", downFor, errs)
}

// memberGen is the newest generation of g's claims on topic (0: none).
func memberGen[T any](g *Group[T], topic string, partitions int32) (gen int32) {
	for p := range partitions {
		if c := claimOf(g, topic, p); c != nil {
			gen = max(gen, c.sess.GenerationID())
		}
	}
	return gen
}

// TestScenario11ParkAndDeadLetterKill: a consumer process with Unordered
// and a DataPath (a static member, Config.InstanceID "p", so that its
// restart takes its place at once) parks 5% of the messages (deferred
// 300 ms: written to the on-disk queue and synced before the commit may
// pass them) and dead-letters 1% (failing 3 times, parked between
// attempts, then appended to the local dead-letter store, fdatasync'ed,
// before the parked copy is let go), under 1000 messages a second; it is
// killed with SIGKILL three times mid-run (ORDERLY_SOAK: once per 5 s of
// it) and started again on the same DataPath. Every message is handled or
// dead-lettered (a parked one by the process that parked it or by the
// next one on that DataPath), every poison message is in the dead-letter
// store, and a repeat (of a handled message or a dead letter) is only of
// what a killed process had touched and the commits (or, for a parked
// message, the queue's journal) did not cover at the kill.
func TestScenario11ParkAndDeadLetterKill(t *testing.T) {
	t.Parallel() // waits on processes and timers mostly: runs beside the others
	const group, partitions, keys, rate = "park-kill", 2, 80, 1000
	n, kills := 8000, 3
	if soak() { // a kill per 5 s of it
		n = int(scenarioDuration(0).Seconds()) * rate
		kills = max(n/(5*rate), 3)
	}
	r, o := oracleRig(t, "11 parking and dead letters, SIGKILL", "park-kill", partitions, n, keys)
	produced := r.produceAtRate(rate)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	var logs, tags []string
	startChild := func(i int) *proctest.Proc {
		tag := fmt.Sprintf("p%d", i)
		log := filepath.Join(dir, tag+".log")
		logs, tags = append(logs, log), append(tags, tag)
		return startScenarioChild(t, childOpts{brokers: r.b.Addrs(), topic: r.topic, group: group, log: log, tag: tag, instance: "p", park: data})
	}
	committed := func() (sum int64) {
		for _, c := range r.b.Committed(group, r.topic) {
			sum += c
		}
		return sum
	}
	p := startChild(0)
	killedAt := map[string]bool{}
	for i := range kills {
		target := int64((i + 1) * n / (kills + 2))
		waitFor(t, time.Minute, fmt.Sprintf("%d messages committed", target), func() bool { return committed() >= target })
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // somewhere between commits
		p.Stop(syscall.SIGKILL)
		o.uncleanEnd(tags[i], r.b.Commits(group, r.topic))
		killedAt[tags[i]] = true
		p = startChild(i + 1)
	}
	produced()
	r.waitAllCommitted(group, 2*time.Minute)
	// The fate of every readable record, from parkFate.
	wantDeferred, wantPoison := map[tpOff]bool{}, map[tpOff]bool{}
	for part, offs := range readable(t, r.b.Addrs(), r.topic) {
		for _, off := range offs {
			deferred, poison := parkFate(part, off)
			if deferred {
				wantDeferred[tpOff{part, off}] = true
			}
			if poison {
				wantPoison[tpOff{part, off}] = true
			}
		}
	}
	if len(wantDeferred) == 0 || len(wantPoison) == 0 {
		t.Fatalf("%d messages to park and %d to dead-letter: the scenario exercises nothing", len(wantDeferred), len(wantPoison))
	}
	storeDir := filepath.Join(data, deadletter.DirName)
	// Parked messages come back after the commit passed them, and poison
	// messages are dead-lettered after their third attempt: wait for
	// every one, while the last process runs.
	var missing []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		peek := newOracle(t, "", r.topic, o.counts)
		var read []childLog
		for i, log := range logs {
			read = append(read, readChildLog(t, tags[i], log))
		}
		feedLogs(peek, read)
		dead, err := localDeadLetters(storeDir)
		missing = missing[:0]
		for k := range wantDeferred {
			if len(peek.comps[k]) == 0 {
				missing = append(missing, fmt.Sprintf("parked %d@%d", k.p, k.off))
			}
		}
		for k := range wantPoison {
			if err != nil || dead[k] == 0 {
				missing = append(missing, fmt.Sprintf("dead letter %d@%d", k.p, k.off))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the commits caught up, %d parked or poison messages not done, first %v", len(missing), missing[:min(5, len(missing))])
		}
	}
	waitReady(t, logs[len(logs)-1])
	p.Stop(syscall.SIGTERM)
	if p.Cmd.ProcessState != nil && !p.Cmd.ProcessState.Success() {
		t.Errorf("the last consumer process exited with %v after SIGTERM (see %s.stderr)", p.Cmd.ProcessState, logs[len(logs)-1])
	}
	byTag := map[string]childLog{}
	firstFail, firstDefer := map[tpOff]time.Time{}, map[tpOff]time.Time{}
	var read []childLog
	for i, log := range logs {
		cl := readChildLog(t, tags[i], log)
		read = append(read, cl)
		byTag[tags[i]] = cl
		for k, f := range cl.failed {
			if at, ok := firstFail[k]; !ok || f.first.Before(at) {
				firstFail[k] = f.first
			}
		}
		for k, at := range cl.deferred {
			if d, ok := firstDefer[k]; !ok || at.Before(d) {
				firstDefer[k] = at
			}
		}
	}
	feedLogs(o, read)
	dead, err := localDeadLetters(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	extraDead := 0
	for k := range dead {
		if !wantPoison[k] {
			t.Errorf("%d@%d is in the dead-letter store but never failed", k.p, k.off)
		}
	}
	for k := range wantPoison {
		if dead[k] > 1 {
			extraDead += dead[k] - 1
			// Justified only by the kill of a process that had failed
			// it: once if the commits at the kill did not cover it (the
			// next process reads it from Kafka again), and once more if
			// that process had run its last attempt (its dead letter
			// written, the parked copy's Finish not yet journaled).
			excuses := 0
			for _, u := range o.unclean {
				f, failed := byTag[u.member].failed[k]
				if failed && !covers(u.covered[k.p], k.off) {
					excuses++
				}
				if failed && f.attempts >= 3 {
					excuses++
				}
			}
			if dead[k]-1 > excuses {
				t.Errorf("poison message %d@%d dead-lettered %d times; repeats the kills justify: %d", k.p, k.off, dead[k], excuses)
			}
		}
		// Parked after its first failure (ParkAfter 0: every failure is
		// parked): the commit may pass it once that is on disk.
		if at, ok := firstFail[k]; ok {
			o.finishedWithoutDo(k.p, k.off, at)
		}
	}
	for k := range wantDeferred {
		if at, ok := firstDefer[k]; ok {
			o.finishedWithoutDo(k.p, k.off, at) // parked after this: the commit may pass it once on disk
		}
		// A killed process that parked it, or ran its parked copy, may
		// leave it to run once more: parked again from Kafka, or its copy
		// not yet finished in the journal.
		for _, u := range o.unclean {
			_, deferred := byTag[u.member].deferred[k]
			ran := false
			for _, c := range o.comps[k] {
				ran = ran || c.member == u.member
			}
			if (deferred && !covers(u.covered[k.p], k.off)) || ran {
				o.mayRepeat(k.p, k.off)
			}
		}
	}
	if len(firstDefer) != len(wantDeferred) || len(firstFail) != len(wantPoison) {
		t.Errorf("logged %d deferrals and %d failing messages, want %d and %d", len(firstDefer), len(firstFail), len(wantDeferred), len(wantPoison))
	}
	o.check(r.b.Addrs(), r.b.Committed(group, r.topic), want{all: true, duplicates: true, unordered: true, deleted: 0})
	t.Logf("%d parked (each handled after its deferral), %d dead-lettered (%d written again after a kill), %d kills", len(wantDeferred), len(wantPoison), extraDead, kills)
}

// localDeadLetters counts the records of the local dead-letter store in dir by
// their origin partition and offset (read-only: a consumer may be writing).
func localDeadLetters(dir string) (map[tpOff]int, error) {
	store, err := deadletter.Open(dir, deadletter.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	dead := map[tpOff]int{}
	err = store.Scan(func(_ int64, rec deadletter.Record) error {
		info, err := deadletter.ParseInfo(rec.Headers)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		dead[tpOff{info.Partition, info.Offset}]++
		return nil
	})
	return dead, err
}
