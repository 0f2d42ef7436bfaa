package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/ledger"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// The demo's traffic is account transfers. A record's key is the paying
// account ("acct-%05d"), so one account's transfers are one ordering lane;
// its value is a ledger header (account index, the transfer's sequence
// number within the account, produce time) followed by a 12-byte payload:
// the receiving account (uint32) and the amount in cents (int64).
const payloadSize = 12

// poisonValue is what a poison record (--poison) carries instead of a
// transfer: New cannot decode it.
var poisonValue = []byte("poison: this is not a transfer")

// plan is the demo's traffic, drawn before anything is produced so that the
// ledger knows what to expect and the balances can be checked.
type plan struct {
	keys   [][]byte  // per account: its Kafka key
	recs   []planRec // per record, in produce order
	counts []uint32  // per account: transfers it pays
	poison int       // poison records among recs
	hot    float64   // share of transfers paid by the busiest account
	seq    []uint32  // per account: next sequence number (produce side)
	sent   atomic.Int64
}

type planRec struct {
	from, to uint32
	cents    int64
	poison   bool
}

// newPlan draws messages transfers over keys accounts (uniform, or Zipf
// with exponent zipf > 0) and spreads poison undecodable records evenly
// among them.
func newPlan(messages, keys, poison int, zipf float64, seed uint64) *plan {
	p := &plan{
		keys:   make([][]byte, keys),
		recs:   make([]planRec, 0, messages+poison),
		counts: make([]uint32, keys),
		seq:    make([]uint32, keys),
		poison: poison,
	}
	for k := range p.keys {
		p.keys[k] = fmt.Appendf(nil, "acct-%05d", k)
	}
	var pick loadgen.Keys = loadgen.NewUniform(keys, seed)
	if zipf > 0 {
		pick = loadgen.NewZipf(keys, zipf, seed)
	}
	r := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908))
	total := messages + poison
	next := 0 // poison records placed so far
	for i := range total {
		if next < poison && i == (next+1)*total/(poison+1) {
			p.recs = append(p.recs, planRec{from: uint32(r.IntN(keys)), poison: true})
			next++
			continue
		}
		from := pick.Next()
		to := from
		if keys > 1 {
			to = r.IntN(keys - 1)
			if to >= from {
				to++
			}
		}
		cents := 1 + r.Int64N(100_000)
		p.recs = append(p.recs, planRec{from: uint32(from), to: uint32(to), cents: cents})
		p.counts[from]++
	}
	p.hot = float64(slices.Max(p.counts)) / float64(messages)
	return p
}

// transfers is how many transfer records (not poison) the plan holds.
func (p *plan) transfers() int { return len(p.recs) - p.poison }

// poisonIn is how many of the first n records are poison.
func (p *plan) poisonIn(n int) int {
	k := 0
	for _, r := range p.recs[:min(n, len(p.recs))] {
		if r.poison {
			k++
		}
	}
	return k
}

// gen is loadgen's Gen: the i-th record, stamped with the current time. It
// is called in order from one goroutine.
func (p *plan) gen(i int) loadgen.Record {
	r := p.recs[i]
	p.sent.Add(1)
	if r.poison {
		return loadgen.Record{Key: p.keys[r.from], Value: poisonValue}
	}
	seq := p.seq[r.from]
	p.seq[r.from]++
	var pl [payloadSize]byte
	binary.BigEndian.PutUint32(pl[0:], r.to)
	binary.BigEndian.PutUint64(pl[4:], uint64(r.cents))
	v := ledger.Encode(make([]byte, 0, ledger.HeaderSize+payloadSize), r.from, seq, time.Now(), pl[:])
	return loadgen.Record{Key: p.keys[r.from], Value: v}
}

// Transfer is a decoded demo record, the value the demo's Do receives.
type Transfer struct {
	From, To   uint32 // account indexes
	Cents      int64
	Seq        uint32    // the transfer's number among its payer's transfers
	ProducedAt time.Time // when the producer stamped it
	Partition  int32
	Offset     int64
}

// errNotTransfer is wrapped by decode errors.
var errNotTransfer = errors.New("not a transfer")

// decode is the Handler's New: it parses the value and checks it against
// the key, so that a record that lost its way is a decode error rather than
// a silent misbooking.
func (p *plan) decode(m *group.Message) (Transfer, error) {
	acct, seq, at, pl, err := ledger.Decode(m.Value)
	if err != nil {
		return Transfer{}, fmt.Errorf("%w: %w", errNotTransfer, err)
	}
	if len(pl) != payloadSize {
		return Transfer{}, fmt.Errorf("%w: payload is %d bytes, want %d", errNotTransfer, len(pl), payloadSize)
	}
	if int(acct) >= len(p.keys) || !bytes.Equal(m.Key, p.keys[acct]) {
		return Transfer{}, fmt.Errorf("%w: key %q does not match account %d", errNotTransfer, m.Key, acct)
	}
	to := binary.BigEndian.Uint32(pl[0:])
	if int(to) >= len(p.keys) {
		return Transfer{}, fmt.Errorf("%w: unknown receiving account %d", errNotTransfer, to)
	}
	return Transfer{
		From: acct, To: to, Cents: int64(binary.BigEndian.Uint64(pl[4:])), Seq: seq, ProducedAt: at,
		Partition: m.Partition, Offset: m.Offset,
	}, nil
}

// decoder is the Handler's New: decode, and a record it rejects is
// finished (the group skips it and commits past it).
func (p *plan) decoder(done *finished) func(m *group.Message) (Transfer, error) {
	return func(m *group.Message) (Transfer, error) {
		t, err := p.decode(m)
		if err != nil {
			done.mark(m.Partition, m.Offset)
		}
		return t, err
	}
}

// split is the Handler's Split: one lane per paying account.
func split(_ *group.Message, t Transfer) uint64 { return uint64(t.From) }

// errSimulated is what a call chosen to fail (--fail) returns.
var errSimulated = errors.New("simulated I/O failure")

// bank is the demo's Do: it books transfers after a simulated I/O delay,
// fails a fraction of calls, and keeps the ledger of what it booked.
type bank struct {
	ledger   *ledger.Ledger
	done     *finished
	balances []atomic.Int64
	booked   []atomic.Uint32 // per account: transfers it paid that were booked
	io       time.Duration   // per call
	ioItem   time.Duration   // per transfer in the call
	fail     float64         // fraction of calls that fail
	seed     uint64

	mu       sync.Mutex
	attempts map[[2]int64]int // by (partition, offset) of a failed batch's first transfer

	firstDo  atomic.Int64 // unix nanos of the first call's start
	lastDone atomic.Int64 // unix nanos of the last successful call's end

	// stuckPartition (--stuck-partition; -1: none): the first call with a
	// record of it hangs, ignoring its ctx, until release is closed (the
	// run ends), holding every record of the call.
	stuckPartition int32
	release        <-chan struct{}
	stuck          atomic.Bool
}

// errReleased is what the --stuck-partition call returns once the run
// ends: it booked nothing.
var errReleased = errors.New("stuck call released at the end of the run (--stuck-partition)")

func newBank(p *plan, done *finished, io, ioItem time.Duration, fail float64, seed uint64) *bank {
	return &bank{
		ledger:   ledger.New(p.counts),
		done:     done,
		balances: make([]atomic.Int64, len(p.keys)),
		booked:   make([]atomic.Uint32, len(p.keys)),
		io:       io,
		ioItem:   ioItem,
		fail:     fail,
		seed:     seed,
		attempts: make(map[[2]int64]int),

		stuckPartition: -1,
	}
}

// do is the Handler's Do. Whether a call fails is decided up front by
// loadgen.Fails from --seed and the partition, offset and attempt of the
// batch's first transfer, so the same batches fail the same way whatever
// the scheduling; a failing call pays its I/O cost and books nothing, so a
// retried batch is never booked twice. A successful call books every
// transfer and records it in the ledger, after the decision to succeed.
func (b *bank) do(ctx context.Context, batch []Transfer) error {
	if len(batch) == 0 {
		return nil
	}
	start := time.Now().UnixNano()
	b.firstDo.CompareAndSwap(0, start)
	first := batch[0]
	if b.stuckPartition >= 0 && slices.ContainsFunc(batch, func(t Transfer) bool { return t.Partition == b.stuckPartition }) && !b.stuck.Swap(true) {
		<-b.release // not ctx: a call that ignores its deadline is a stuck worker
		return errReleased
	}
	failing := loadgen.Fails(b.fail, b.seed, first.Partition, first.Offset, b.attempt(first))
	if cost := b.io + time.Duration(len(batch))*b.ioItem; cost > 0 {
		t := time.NewTimer(cost)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if failing {
		return errSimulated
	}
	b.succeeded(first)
	for _, t := range batch {
		b.balances[t.From].Add(-t.Cents)
		b.balances[t.To].Add(t.Cents)
		b.booked[t.From].Add(1)
		b.ledger.Record(t.From, t.Seq, t.ProducedAt)
		b.done.mark(t.Partition, t.Offset)
	}
	storeMax(&b.lastDone, time.Now().UnixNano())
	return nil
}

// attempt numbers the calls on the batch that starts at first: 1, then +1
// on each retry. (A typed Do does not see group.Message.Attempt.)
func (b *bank) attempt(first Transfer) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := [2]int64{int64(first.Partition), first.Offset}
	b.attempts[k]++
	return b.attempts[k]
}

// succeeded forgets the attempts of the batch that starts at first.
func (b *bank) succeeded(first Transfer) {
	b.mu.Lock()
	delete(b.attempts, [2]int64{int64(first.Partition), first.Offset})
	b.mu.Unlock()
}

// storeMax sets a to v unless it already holds more.
func storeMax(a *atomic.Int64, v int64) {
	for old := a.Load(); v > old && !a.CompareAndSwap(old, v); old = a.Load() {
	}
}

// mismatched counts accounts whose balance is not what booking their
// first transfers gives: for each payer as many of its transfers, in plan
// order, as it had booked (all of them once the run is complete). With
// transfers booked twice, or out of order, balances differ.
func (b *bank) mismatched(p *plan) int {
	expect := make([]int64, len(p.keys))
	seq := make([]uint32, len(p.keys))
	for _, r := range p.recs {
		if r.poison {
			continue
		}
		if seq[r.from] < b.booked[r.from].Load() {
			expect[r.from] -= r.cents
			expect[r.to] += r.cents
		}
		seq[r.from]++
	}
	n := 0
	for k := range b.balances {
		if b.balances[k].Load() != expect[k] {
			n++
		}
	}
	return n
}
