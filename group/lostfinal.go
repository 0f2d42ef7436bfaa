package group

import (
	"sync"
	"time"

	"github.com/orderly-go/orderly/commit"
)

// Lost final commits. A claim whose final commit did not reach the
// coordinator (the coordinator's connection dropped as the session ended,
// the commit refused) leaves the partition at the offset committed before:
// its next owner handles again everything the claim finished since. When
// that next owner is this member (its session ended and it joined again,
// and kept the partition), the member still knows what it finished: the
// claim keeps its final frontier and metadata here (lostFinals.keep), and
// the member's next claim of the partition starts from them (resumeFrom),
// provided that
//   - the coordinator still holds exactly the offset and metadata it held
//     when the final commit was found missing (no commit moved it since,
//     a new owner's or an offset reset's, unless one wrote the very same
//     offset and metadata), and that offset is not below where the lost
//     claim started (it skips only what it handled);
//   - the claim starts within Session.Timeout + Rebalance.Timeout of the
//     loss, the time a member takes to join again when its session ended
//     under it; a claim much later has no business trusting a view that
//     old (the group may have been empty, its offsets reset and set back).
//
// Skipping what the member finished is safe whoever else handled the
// partition in between without committing: each of those messages was
// handled, in its key's order, before the loss. A claim that takes the
// entry and ends before it marks anything (or cannot read the committed
// offset to check it) leaves it for the next (see released).

// lostFinal is a claim's final frontier that did not reach the
// coordinator, and what the coordinator held instead.
type lostFinal struct {
	start     int64     // where the lost claim started
	committed int64     // the offset the coordinator held when the loss was found
	meta      string    // its metadata then
	next      int64     // the claim's final frontier (above committed)
	final     string    // the metadata the claim marked with next ("" none)
	at        time.Time // when the loss was found
	// counted: every message below it was counted in Stats.Committed by
	// this member's claims (the lost one, and those before it whose loss
	// it resumed from): next, or an earlier lost frontier above it.
	counted int64
}

// newLostFinal is the lost final commit of a claim that started at start
// and ended with its frontier at next (final: the metadata marked with
// it), the coordinator holding committed with meta instead. ok is false
// when there is nothing to keep: the coordinator holds no offset at all
// (committed < 0), which leaves nothing to tie the frontier to the log (a
// topic deleted and recreated meanwhile would pass resume's checks), or
// one below where the claim started (the claim did not handle what lies
// between; a start < 0 is unknown), or the frontier itself.
func newLostFinal(start, committed int64, meta string, next int64, final string, at time.Time) (lostFinal, bool) {
	if start < 0 || committed < start || committed >= next { // committed < 0 (none) is below any start
		return lostFinal{}, false
	}
	return lostFinal{start: start, committed: committed, meta: meta, next: next, final: final, at: at, counted: next}, true
}

// after is f, the loss of a claim that resumed from prev (this member's
// earlier lost final commit of the partition; nil: none): what prev's
// claims counted stays counted, even where f's frontier stopped below
// prev's.
func (f lostFinal) after(prev *lostFinal) lostFinal {
	if prev != nil {
		f.counted = max(f.counted, prev.counted)
	}
	return f
}

// lostFinals holds the lost final commits of the member's claims, at most
// one per partition, until the member's next claim of the partition takes
// it.
type lostFinals struct {
	mu  sync.Mutex
	by  map[topicPartition]lostFinal
	ttl time.Duration // Session.Timeout + Rebalance.Timeout
}

func newLostFinals(ttl time.Duration) *lostFinals {
	return &lostFinals{by: make(map[topicPartition]lostFinal), ttl: ttl}
}

// keep records a claim's lost final commit (or puts back one a claim
// took and could not use), replacing the partition's previous one, and
// forgets those too old to be used.
func (l *lostFinals) keep(tp topicPartition, f lostFinal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, old := range l.by {
		if f.at.Sub(old.at) > l.ttl {
			delete(l.by, k)
		}
	}
	l.by[tp] = f
}

// take removes and returns the partition's lost final commit, nil if
// none.
func (l *lostFinals) take(tp topicPartition) *lostFinal {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.by[tp]
	if !ok {
		return nil
	}
	delete(l.by, tp)
	return &f
}

// resume returns what a claim starting at the coordinator's committed
// offset off (with metadata meta) at now may skip by f: every offset from
// off to f's frontier, and the finished offsets and waiting messages f's
// metadata lists above it. ok is false when f does not apply: the
// coordinator holds something else than when f was lost, or f is too old.
// (newLostFinal made sure that f.committed lies between the lost claim's
// start and its frontier.)
func (f lostFinal) resume(off int64, meta string, now time.Time, ttl time.Duration) (done commit.Done, ok bool) {
	if off != f.committed || meta != f.meta || now.Sub(f.at) > ttl {
		return commit.Done{}, false
	}
	above, err := commit.DecodeMeta(f.final)
	if err != nil || above.Base != f.next {
		above = commit.Done{} // nothing listed above the frontier (or "" with metadata off)
	}
	ranges := make([]commit.Range, 0, 1+len(above.Ranges))
	ranges = append(ranges, commit.Range{Start: off, End: f.next})
	ranges = above.AppendAfter(ranges, f.next-1)
	return commit.Done{Base: off, Ranges: ranges, Waiting: above.Waiting}, true
}
