package main

import "github.com/twmb/franz-go/pkg/kmsg"

// txOrder passes a partition's records on, in offset order, as a
// read-committed consumer sees them, from a read of every record and
// transaction marker: a record of a transaction waits for its marker (a
// commit passes it on, an abort drops it), and every record after it waits
// behind it, as the last stable offset holds them back for a consumer. The
// records still waiting when the read ends are behind a transaction that
// is still open.
//
// It works from the markers instead of reading committed: a read-committed
// fetch drops aborted records and returns nothing at or past the last
// stable offset, so a range that ends in aborted records whose marker is
// past that offset (two producers' transactions interleaved) has nothing
// that says its end was reached.
type txOrder struct {
	pass    func(*entry) error
	waiting []txRecord // in offset order; the first is of an open transaction
}

type txRecord struct {
	e         entry
	producer  int64 // of a transaction's record; -1: not transactional
	committed bool  // its transaction committed, or it is not transactional
}

// record takes the next record: data (transactional or not) in order.
func (t *txOrder) record(e entry, transactional bool, producer int64) error {
	if !transactional {
		if len(t.waiting) == 0 {
			return t.pass(&e)
		}
		t.waiting = append(t.waiting, txRecord{e: e, producer: -1, committed: true})
		return nil
	}
	t.waiting = append(t.waiting, txRecord{e: e, producer: producer})
	return nil
}

// marker takes a transaction marker (a control record's key) of producer:
// its waiting records are passed on (commit) or dropped (abort), and so
// are those that waited only behind them.
func (t *txOrder) marker(key []byte, producer int64) error {
	commit := controlCommit(key)
	kept := t.waiting[:0]
	for _, r := range t.waiting {
		switch {
		case r.producer != producer || r.committed:
			kept = append(kept, r)
		case commit:
			r.committed = true
			kept = append(kept, r)
		}
	}
	clear(t.waiting[len(kept):])
	t.waiting = kept
	for len(t.waiting) > 0 && t.waiting[0].committed {
		e := t.waiting[0].e // pass may keep the pointer (replay does)
		t.waiting[0] = txRecord{}
		t.waiting = t.waiting[1:]
		if err := t.pass(&e); err != nil {
			return err
		}
	}
	return nil
}

// heldBack is the offset of the first record an open transaction holds
// back, and how many committed records wait behind it.
func (t *txOrder) heldBack() (first int64, committed int, ok bool) {
	if len(t.waiting) == 0 {
		return 0, 0, false
	}
	for _, r := range t.waiting {
		if r.committed {
			committed++
		}
	}
	return t.waiting[0].e.offset, committed, true
}

// controlCommit reports whether a control record's key is a commit
// marker; anything else (an abort, a key that does not read) drops the
// transaction's records, as a consumer would not pass them on either.
func controlCommit(key []byte) bool {
	var k kmsg.ControlRecordKey
	return k.ReadFrom(key) == nil && k.Type == kmsg.ControlRecordKeyTypeCommit
}
