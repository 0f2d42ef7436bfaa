package group

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// The oracle of the reliability scenarios (scenario_*_test.go). Producers
// write (key, seq) ledger records; every successful Do reports each
// message's (partition, offset, key, seq, attempt, member, generation) and
// when it finished; commits are observed as the broker receives them
// (OffsetCommit requests, with member and generation) or sampled from the
// broker (for a broker in another process). At the end the oracle reads
// the topic back (read-committed: what a consumer can ever be given) and
// checks BRIEF's invariants:
//
//   - no loss: every record below a partition's final committed offset was
//     handled (or finished without Do: dead-lettered, parked);
//   - lane order: the first completions of each key come in offset order
//     (every key lives on one partition, so this is per partition and key);
//   - duplicates: a record handled twice is justified only if one of its
//     completions came from a member that ended uncleanly (killed, evicted,
//     its commits refused) and was not covered, when that happened, by the
//     commits the broker held (the committed offset or the finished offsets
//     listed in its metadata): that is the bound, and it is what Orderly
//     promises (a crash repeats only work finished after the last commit
//     that reached the broker). After graceful handoffs it is 0;
//   - commits: never past the first unfinished offset at the time the
//     request (or sample) was made; never backwards within one member's
//     generation; the committed offset the broker holds never goes back;
//     and no zombie commit: a member committing a partition after another
//     member committed it in the same or a later generation. A zombie whose
//     generation is below the newest one seen is refused by the broker
//     (counted); one at the newest generation could be accepted, and is a
//     violation.
//
// Each scenario logs one summary line, "SCENARIO <name>: ...", which the
// README's Reliability table collects.
type oracle struct {
	t      *testing.T
	name   string
	topic  string
	ledger *ledger.Ledger
	counts []uint32

	mu       sync.Mutex
	comps    map[tpOff][]completion
	other    map[tpOff]time.Time // finished without Do (dead letters, parked)
	commits  []commitObs
	sampled  map[int32]sampledCommit // last sampled broker commit per partition
	unclean  []uncleanMark
	problems []string
	maxGen   int32
	owners   map[int32]ownerMark // last committer of each partition
	// repeatable: records that may be handled once more per count, for a
	// reason outside the completions (see mayRepeat).
	repeatable map[tpOff]int
}

type tpOff struct {
	p   int32
	off int64
}

// completion is one successful Do of a record.
type completion struct {
	member  string
	gen     int32
	attempt int
	at      time.Time
}

// commitObs is a commit request the broker received, or a sample of what
// it held.
type commitObs struct {
	at     time.Time
	member string // "" for a sample
	gen    int32
	p      int32
	off    int64
}

// uncleanMark is a member that ended uncleanly and the commits the broker
// held then: its completions not covered by them may be repeated.
type uncleanMark struct {
	member  string
	covered map[int32]commit.Done // Base: the committed offset; Ranges: listed as finished
	upTo    int32                 // only completions of generations up to this one (0: all)
}

type ownerMark struct {
	member string
	gen    int32
}

// newOracle starts the oracle of scenario name over topic, whose
// producers write counts[k] records of key k (seqs 0..counts[k]-1).
func newOracle(t *testing.T, name, topic string, counts []uint32) *oracle {
	return &oracle{
		t: t, name: name, topic: topic, counts: counts, ledger: ledger.New(counts),
		comps: map[tpOff][]completion{}, other: map[tpOff]time.Time{}, sampled: map[int32]sampledCommit{},
		owners: map[int32]ownerMark{}, repeatable: map[tpOff]int{},
	}
}

// done records a successful Do of a ledger record.
func (o *oracle) done(member string, gen int32, p int32, off int64, attempt int, value []byte, at time.Time) {
	key, seq, _, _, err := ledger.Decode(value)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.problems = append(o.problems, fmt.Sprintf("%s handled %d@%d, not a ledger record: %v", member, p, off, err))
		return
	}
	o.doneLocked(member, gen, p, off, attempt, key, seq, at)
}

func (o *oracle) doneLocked(member string, gen int32, p int32, off int64, attempt int, key, seq uint32, at time.Time) {
	o.ledger.Record(key, seq, time.Time{})
	k := tpOff{p, off}
	o.comps[k] = append(o.comps[k], completion{member: member, gen: gen, attempt: attempt, at: at})
}

// finishedWithoutDo records a record finished another way (dead-lettered,
// parked durably): commits may pass it from then on.
func (o *oracle) finishedWithoutDo(p int32, off int64, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.other[tpOff{p, off}]; !ok {
		o.other[tpOff{p, off}] = at
	}
}

// observe is a broker.ObserveCommits hook.
func (o *oracle) observe(req *kmsg.OffsetCommitRequest) {
	now := time.Now()
	member := req.MemberID
	if req.InstanceID != nil && *req.InstanceID != "" {
		member = "instance:" + *req.InstanceID // a restarted static member is the same member
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tp := range req.Topics {
		if tp.Topic != o.topic {
			continue
		}
		for _, p := range tp.Partitions {
			o.commits = append(o.commits, commitObs{at: now, member: member, gen: req.Generation, p: p.Partition, off: p.Offset})
		}
	}
	o.maxGen = max(o.maxGen, req.Generation)
}

// sample records what the broker holds (a broker in another process,
// whose requests cannot be observed). A committed offset must never go
// back, and what a commit covers (its offset and the finished ranges in
// its metadata) must stay covered by every later commit: a new owner
// passes on the finished set it resumed from, so a coverage that shrinks
// means finished messages will be handled again.
func (o *oracle) sample(committed map[int32]broker.Commit, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p, c := range committed {
		cov := coverage(c)
		if last, ok := o.sampled[p]; ok {
			if c.Offset < last.cov.Base {
				o.problems = append(o.problems, fmt.Sprintf("the broker's committed offset of partition %d went back from %d to %d (a zombie commit accepted)", p, last.cov.Base, c.Offset))
			} else if off, lost := uncovered(last.cov, cov); lost > 0 {
				o.problems = append(o.problems, fmt.Sprintf("the broker's commit of partition %d at %s (offset %d) no longer covers %d offsets (the first %d) that its commit at %s (offset %d) covered: finished messages will be handled again",
					p, at.Format("15:04:05.000"), c.Offset, lost, off, last.at.Format("15:04:05.000"), last.cov.Base))
			}
		}
		o.sampled[p] = sampledCommit{cov: cov, at: at}
		o.commits = append(o.commits, commitObs{at: at, p: p, off: c.Offset})
	}
}

// sampledCommit is a partition's last sampled commit.
type sampledCommit struct {
	cov commit.Done // Base: the committed offset
	at  time.Time
}

// coverage is what c covers: every offset below its offset and the
// finished ranges its metadata lists (none if the metadata is not
// orderly's, or is for another offset).
func coverage(c broker.Commit) commit.Done {
	d, err := commit.DecodeMeta(c.Metadata)
	if err != nil || d.Base != c.Offset {
		d = commit.Done{}
	}
	d.Base = c.Offset
	return d
}

// uncovered counts the offsets was covers at or above now's base that now
// does not, and returns the first of them. Both range lists are sorted
// and disjoint: one pass over each.
func uncovered(was, now commit.Done) (first int64, n int64) {
	first = -1
	j := 0
	for _, r := range was.Ranges {
		for off := max(r.Start, now.Base); off < r.End; {
			for j < len(now.Ranges) && now.Ranges[j].End <= off {
				j++
			}
			next := r.End // off..next: not covered, or covered, as a block
			if j < len(now.Ranges) && now.Ranges[j].Start <= off {
				off = min(now.Ranges[j].End, r.End)
				continue
			}
			if j < len(now.Ranges) {
				next = min(next, now.Ranges[j].Start)
			}
			if first < 0 {
				first = off
			}
			n += next - off
			off = next
		}
	}
	return first, n
}

// uncleanEnd records that member ended uncleanly (killed, evicted, its
// commits refused) while the broker held commits.
func (o *oracle) uncleanEnd(member string, commits map[int32]broker.Commit) {
	cov := map[int32]commit.Done{}
	for p, c := range commits {
		cov[p] = coverage(c)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unclean = append(o.unclean, uncleanMark{member: member, covered: cov})
}

// mayRepeat records that the record p/off may be handled once more than
// the completions justify: it was parked durably (in a DataPath that
// outlives the process) by a process that was then killed, before the
// commit passed it or before the parked copy's Finish was journaled, so
// the next process can run it both from the parked copy and from Kafka
// or from the parked copy again. Each call adds one to the bound.
func (o *oracle) mayRepeat(p int32, off int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.repeatable[tpOff{p, off}]++
}

// uncleanEndGen is uncleanEnd for a member that lives on (the broker died
// under it): only its completions in generations up to gen may be
// repeated; a later session starts from what the broker holds then.
func (o *oracle) uncleanEndGen(member string, gen int32, commits map[int32]broker.Commit) {
	o.uncleanEnd(member, commits)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unclean[len(o.unclean)-1].upTo = gen
}

// excuses reports whether u may explain a repeat of c's record k.
func (u uncleanMark) excuses(c completion, k tpOff) bool {
	return u.member == c.member && (u.upTo == 0 || c.gen <= u.upTo) && !covers(u.covered[k.p], k.off)
}

// covers reports whether d (a partition's commit) covers off.
func covers(d commit.Done, off int64) bool {
	if off < d.Base {
		return true
	}
	for _, r := range d.Ranges {
		if r.Start <= off && off < r.End {
			return true
		}
	}
	return false
}

// verdict is what a scenario found.
type verdict struct {
	Produced, Readable, Handled int
	Duplicates, DupBound        int
	Unjustified                 int // duplicates outside the bound
	OrderViolations             int
	Lost                        int // readable, below the final commit, never finished
	NotHandled                  int // readable and never finished (above the final commit if Lost is 0)
	Deleted                     int // produced, never readable (deleted before read, aborted)
	PastUnfinished              int // commits past the first unfinished offset
	Backwards                   int // commits back within a member's generation
	ZombiesRefused              int // zombie commits at an old generation (the broker refuses them)
	ZombiesAtNewest             int // zombie commits at the newest generation (a violation)
	Commits                     int
}

// readable reads each partition of topic back from its log start to its
// high watermark, read-committed: the records a consumer can be given.
func readable(t *testing.T, addrs []string, topic string) map[int32][]int64 {
	t.Helper()
	sc := DefaultSarama()
	sc.ClientID = "orderly-oracle"
	client, err := sarama.NewClient(addrs, sc)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("oracle: partitions of %s: %v", topic, err)
	}
	out := map[int32][]int64{}
	for _, p := range parts {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("oracle: high watermark of %s/%d: %v", topic, p, err)
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("oracle: read %s/%d: %v", topic, p, err)
		}
		var offs []int64
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				offs = append(offs, m.Offset)
				done = m.Offset >= hw-1
			case <-time.After(2 * time.Second): // nothing more below the watermark (it ends in markers)
				done = true
			}
		}
		pc.Close()
		out[p] = offs
	}
	return out
}

// verdict computes the checks given what is readable and the final
// committed offsets.
func (o *oracle) verdict(records map[int32][]int64, final map[int32]int64) verdict {
	o.mu.Lock()
	defer o.mu.Unlock()
	var v verdict
	rep := o.ledger.Report()
	v.Produced, v.OrderViolations, v.Handled = rep.Produced, rep.OrderViolations, rep.Distinct
	v.Commits = len(o.commits)
	// When each prefix of each partition was all finished.
	finishedAt := func(k tpOff) (time.Time, bool) {
		var first time.Time
		for _, c := range o.comps[k] {
			if first.IsZero() || c.at.Before(first) {
				first = c.at
			}
		}
		if at, ok := o.other[k]; ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
		return first, !first.IsZero()
	}
	doneBy := map[int32]func(off int64) time.Time{}
	readableCount := 0
	for p, offs := range records {
		readableCount += len(offs)
		// prefix[i]: when offs[0..i) were all finished (the max of their
		// first finishes; far future if one never finished).
		prefix := make([]time.Time, len(offs)+1)
		never := time.Unix(0, math.MaxInt64)
		for i, off := range offs {
			at, ok := finishedAt(tpOff{p, off})
			if !ok {
				at = never
			}
			prefix[i+1] = prefix[i]
			if at.After(prefix[i+1]) {
				prefix[i+1] = at
			}
		}
		doneBy[p] = func(off int64) time.Time {
			i, _ := slices.BinarySearch(offs, off) // records below off
			return prefix[i]
		}
		for _, off := range offs {
			if _, ok := finishedAt(tpOff{p, off}); ok {
				continue
			}
			v.NotHandled++
			if off < final[p] {
				v.Lost++
				if v.Lost <= 5 {
					o.problems = append(o.problems, fmt.Sprintf("partition %d offset %d is below the committed offset %d and was never handled (lost)", p, off, final[p]))
				}
			}
		}
	}
	v.Readable = readableCount
	v.Deleted = v.Produced - readableCount
	// Commits.
	type mgp struct {
		member string
		gen    int32
		p      int32
	}
	last := map[mgp]int64{}
	owners := map[int32]ownerMark{}
	for _, c := range o.commits {
		if by, ok := doneBy[c.p]; ok && by(c.off).After(c.at) {
			v.PastUnfinished++
			if v.PastUnfinished <= 5 {
				o.problems = append(o.problems, fmt.Sprintf("commit of partition %d offset %d by %q gen %d at %s passed unfinished work",
					c.p, c.off, c.member, c.gen, c.at.Format("15:04:05.000")))
			}
		}
		if c.member == "" {
			continue
		}
		k := mgp{c.member, c.gen, c.p}
		if prev, ok := last[k]; ok && c.off < prev {
			v.Backwards++
			o.problems = append(o.problems, fmt.Sprintf("member %q gen %d committed partition %d offset %d after %d (backwards)", c.member, c.gen, c.p, c.off, prev))
		}
		last[k] = max(last[k], c.off)
		if own, ok := owners[c.p]; ok && own.member != c.member && own.gen >= c.gen {
			if c.gen < o.maxGen {
				v.ZombiesRefused++
			} else {
				v.ZombiesAtNewest++
				o.problems = append(o.problems, fmt.Sprintf("zombie commit: member %q gen %d committed partition %d offset %d after %q committed it in gen %d",
					c.member, c.gen, c.p, c.off, own.member, own.gen))
			}
			continue
		}
		owners[c.p] = ownerMark{c.member, c.gen}
	}
	// Duplicates and their bound.
	for k, cs := range o.comps {
		if len(cs) < 2 {
			continue
		}
		v.Duplicates += len(cs) - 1
		justified := len(cs)-1 <= o.repeatable[k]
		for _, c := range cs {
			for _, u := range o.unclean {
				justified = justified || u.excuses(c, k)
			}
		}
		if !justified {
			v.Unjustified += len(cs) - 1
			if v.Unjustified <= 5 {
				var who []string
				for _, c := range cs {
					who = append(who, fmt.Sprintf("%s(gen %d, attempt %d, %s)", c.member, c.gen, c.attempt, c.at.Format("15:04:05.000")))
				}
				o.problems = append(o.problems, fmt.Sprintf("partition %d offset %d handled %d times with no unclean end to explain it: %s",
					k.p, k.off, len(cs), strings.Join(who, ", ")))
			}
		}
	}
	for _, n := range o.repeatable {
		v.DupBound += n
	}
	// The bound: each completion that an unclean end excuses (counted
	// once however many ends excuse it), each may be repeated once.
	for k, cs := range o.comps {
		for _, c := range cs {
			for _, u := range o.unclean {
				if u.excuses(c, k) {
					v.DupBound++
					break
				}
			}
		}
	}
	return v
}

// want is what a scenario expects beyond the invariants.
type want struct {
	all        bool // every readable record handled and committed
	unordered  bool // Unordered: no lane order to check
	duplicates bool // duplicates may happen (unclean ends); they must stay within the bound
	deleted    int  // records expected never to be readable (deleted by retention, aborted): -1 any
}

// check computes the verdict, fails the test on any violation, and logs
// the scenario's summary line.
func (o *oracle) check(addrs []string, final map[int32]int64, w want) verdict {
	o.t.Helper()
	v := o.verdict(readable(o.t, addrs, o.topic), final)
	o.mu.Lock()
	problems := append([]string(nil), o.problems...)
	o.mu.Unlock()
	for i, p := range problems {
		if i == 10 {
			o.t.Errorf("... and %d more problems", len(problems)-10)
			break
		}
		o.t.Error(p)
	}
	switch {
	case v.Lost != 0 || (!w.unordered && v.OrderViolations != 0) || v.PastUnfinished != 0 || v.Backwards != 0 || v.ZombiesAtNewest != 0:
		o.t.Errorf("%s: got lost %d, order violations %d, commits past unfinished work %d, backwards %d, zombie commits at the newest generation %d; want all 0",
			o.name, v.Lost, v.OrderViolations, v.PastUnfinished, v.Backwards, v.ZombiesAtNewest)
	case v.Unjustified != 0 || (!w.duplicates && v.Duplicates != 0):
		o.t.Errorf("%s: got %d duplicates, %d of them outside the bound (%d finished by members that ended uncleanly, not covered by the commits then); want %s",
			o.name, v.Duplicates, v.Unjustified, v.DupBound, map[bool]string{true: "all within it", false: "0 (graceful)"}[w.duplicates])
	case w.all && v.NotHandled != 0:
		o.t.Errorf("%s: %d readable records never handled, want 0", o.name, v.NotHandled)
	case w.deleted >= 0 && v.Deleted != w.deleted:
		o.t.Errorf("%s: %d produced records not readable, want %d", o.name, v.Deleted, w.deleted)
	case v.Commits == 0:
		o.t.Errorf("%s: no commit observed: the commit checks did not run", o.name)
	}
	o.t.Logf("SCENARIO %s: messages %d, handled %d, duplicates %d (bound %d), order violations %d, lost %d, commit violations %d (past unfinished %d, backwards %d, zombie %d), zombie commits refused %d, deleted before read %d, commits checked %d",
		o.name, v.Produced, v.Handled, v.Duplicates, v.DupBound, v.OrderViolations, v.Lost,
		v.PastUnfinished+v.Backwards+v.ZombiesAtNewest, v.PastUnfinished, v.Backwards, v.ZombiesAtNewest,
		v.ZombiesRefused, v.Deleted, v.Commits)
	return v
}

// scenarioDuration is how long a churn scenario runs: short by default,
// ORDERLY_SOAK (a duration, or 1 for soakDefault) for the long version.
func scenarioDuration(short time.Duration) time.Duration {
	env := os.Getenv("ORDERLY_SOAK")
	if env == "1" {
		return soakDefault
	}
	if d, err := time.ParseDuration(env); err == nil && d > 0 {
		return d
	}
	return short
}

// soakDefault is the long versions' length with ORDERLY_SOAK=1.
const soakDefault = 5 * time.Minute

// soak reports whether the long versions run (ORDERLY_SOAK is set).
func soak() bool { return scenarioDuration(0) > 0 }

// member is one Group of a scenario with a Do that reports to the oracle.
type member struct {
	tag   string
	o     *oracle
	g     atomic.Pointer[Group[*Message]]
	delay time.Duration // per Do call
	// hook, if set, runs first in each Do call; an error fails the call.
	hook func(ctx context.Context, batch []*Message) error
	n    atomic.Int64
}

// Do records each message of a successful call, before returning.
func (m *member) Do(ctx context.Context, batch []*Message) error {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	if m.hook != nil {
		if err := m.hook(ctx, batch); err != nil {
			return err
		}
	}
	now := time.Now()
	gens := map[int32]int32{}
	g := m.g.Load()
	for _, msg := range batch {
		gen, ok := gens[msg.Partition]
		if !ok && g != nil {
			if c := claimOf(g, msg.Topic, msg.Partition); c != nil {
				gen = c.sess.GenerationID()
			}
			gens[msg.Partition] = gen
		}
		m.o.done(m.tag, gen, msg.Partition, msg.Offset, msg.Attempt, msg.Value, now)
	}
	m.n.Add(int64(len(batch)))
	return nil
}

// start makes a Group for the member from cfg and runs it.
func (m *member) start(t *testing.T, cfg Config) (stop func() error) {
	t.Helper()
	g := newGroup(t, cfg, m.Do)
	m.g.Store(g)
	return run(t, g)
}

// oracleRig is a rig whose checks are the oracle's.
func oracleRig(t *testing.T, name, topic string, partitions int32, n, keys int) (*rig, *oracle) {
	t.Helper()
	plan := make([]planned, n)
	for i := range plan {
		plan[i] = planned{key: uint32(i % keys), part: -1}
	}
	r := newRigQuiet(t, topic, partitions, plan)
	o := newOracle(t, name, topic, r.counts)
	r.b.ObserveCommits(o.observe)
	return r, o
}

// finalCheck waits for groupID to commit everything and runs the oracle.
func (r *rig) finalCheck(o *oracle, groupID string, timeout time.Duration, w want) verdict {
	r.t.Helper()
	r.waitAllCommitted(groupID, timeout)
	return o.check(r.b.Addrs(), r.b.Committed(groupID, r.topic), w)
}

// produceAtRate produces the rig's whole plan in the background, perSecond
// messages a second in tenths, as live traffic; wait returns once all is
// acknowledged and fails the test on a produce error.
func (r *rig) produceAtRate(perSecond int) (wait func()) {
	r.t.Helper()
	return producePlan(r.t, r.b.Addrs(), r.topic, r.plan, r.seqs, r.payload, perSecond)
}

// producePlan produces plan (seqs: each message's seq within its key) to
// topic on addrs in the background, perSecond messages a second in tenths
// (0: at once); wait returns once all is acknowledged and fails the test
// on a produce error.
func producePlan(t *testing.T, addrs []string, topic string, plan []planned, seqs []uint32, payload []byte, perSecond int) (wait func()) {
	t.Helper()
	chunk := len(plan)
	if perSecond > 0 {
		chunk = max(perSecond/10, 1)
	}
	done, quit := make(chan error, 1), make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		now := time.Now()
		for from := 0; from < len(plan); from += chunk {
			to := min(from+chunk, len(plan))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := loadgen.Produce(ctx, addrs, topic, to-from, func(i int) loadgen.Record {
				p := plan[from+i]
				return loadgen.Record{
					Key:    fmt.Appendf(nil, "k%d", p.key),
					Value:  ledger.Encode(nil, p.key, seqs[from+i], now, payload),
					Pinned: p.part >= 0, Partition: p.part,
				}
			})
			cancel()
			if err != nil {
				done <- fmt.Errorf("produce messages %d-%d: %w", from, to, err)
				return
			}
			select {
			case <-tick.C:
			case <-quit:
				done <- nil
				return
			}
		}
		done <- nil
	}()
	var once sync.Once
	var err error
	wait = func() {
		t.Helper()
		once.Do(func() { err = <-done })
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { close(quit); once.Do(func() { err = <-done }) })
	return wait
}

// planOf is a plan of n messages over keys keys (partitioned by key hash)
// with each message's seq within its key, and the count per key.
func planOf(n, keys int) (plan []planned, seqs, counts []uint32) {
	plan, seqs, counts = make([]planned, n), make([]uint32, n), make([]uint32, keys)
	for i := range plan {
		k := uint32(i % keys)
		plan[i] = planned{key: k, part: -1}
		seqs[i] = counts[k]
		counts[k]++
	}
	return plan, seqs, counts
}

// byPartition sorts a partition map's keys.
func byPartition[V any](m map[int32]V) []int32 {
	keys := make([]int32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}

// envSet reports whether the environment variable name is "1".
func envSet(name string) bool { return os.Getenv(name) == "1" }

// runWatched is run, and also reports whether Run returned on its own
// (ended's ok) and with what.
func runWatched[T any](t *testing.T, g *Group[T]) (stop func() error, ended func() (error, bool)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() { err = g.Run(ctx); close(done) }()
	stop = func() error {
		cancel()
		select {
		case <-done:
			return err
		case <-time.After(60 * time.Second):
			return fmt.Errorf("Run did not return within 60s of cancel")
		}
	}
	ended = func() (error, bool) {
		select {
		case <-done:
			return err, true
		default:
			return nil, false
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop, ended
}
