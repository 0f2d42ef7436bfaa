// Package ledger checks what a consumer's Do saw against what was produced:
// every produced message carries its key index, its sequence number within
// the key and its produce time; the ledger counts messages lost, seen twice,
// and seen out of per-key order, and the end-to-end latency.
package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// HeaderSize is the length of the header Encode writes before the payload.
const HeaderSize = 20

const magic = 0x4f52 // "OR"

// ErrBadRecord reports a value that does not start with a ledger header.
var ErrBadRecord = errors.New("ledger: not a ledger record")

// Encode appends a header for (key, seq, at) and payload to dst.
func Encode(dst []byte, key, seq uint32, at time.Time, payload []byte) []byte {
	var h [HeaderSize]byte
	binary.BigEndian.PutUint16(h[0:], magic)
	binary.BigEndian.PutUint16(h[2:], 0) // version
	binary.BigEndian.PutUint32(h[4:], key)
	binary.BigEndian.PutUint32(h[8:], seq)
	binary.BigEndian.PutUint64(h[12:], uint64(at.UnixNano()))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// Decode reads the header of a value written by Encode.
func Decode(v []byte) (key, seq uint32, at time.Time, payload []byte, err error) {
	if len(v) < HeaderSize || binary.BigEndian.Uint16(v) != magic {
		return 0, 0, time.Time{}, nil, fmt.Errorf("%w (%d bytes)", ErrBadRecord, len(v))
	}
	key = binary.BigEndian.Uint32(v[4:])
	seq = binary.BigEndian.Uint32(v[8:])
	at = time.Unix(0, int64(binary.BigEndian.Uint64(v[12:])))
	return key, seq, at, v[HeaderSize:], nil
}

// Ledger records what Do saw. Safe for concurrent use.
type Ledger struct {
	shards [64]shard
	counts []uint32 // produced per key
}

type shard struct {
	mu        sync.Mutex
	keys      map[uint32]*keyState
	latencies []time.Duration
	dups      int
	order     int
	unknown   int
	_         [64]byte // the fields above are 64 bytes: 128 per shard, so no two shards' fields share a cache line
}

type keyState struct {
	next uint32   // one past the highest seq seen
	seen []uint64 // bitset of seqs seen
}

// New returns a ledger expecting counts[k] messages for key k, with
// sequence numbers 0..counts[k]-1.
func New(counts []uint32) *Ledger {
	l := &Ledger{counts: counts}
	for i := range l.shards {
		l.shards[i].keys = make(map[uint32]*keyState)
	}
	return l
}

// Record notes that Do saw (key, seq), produced at producedAt (zero: no
// latency sample): a duplicate, out of per-key order, or unknown (never
// produced) sighting counts as such in the Report.
func (l *Ledger) Record(key, seq uint32, producedAt time.Time) {
	var lat time.Duration
	if !producedAt.IsZero() {
		lat = time.Since(producedAt)
	}
	s := &l.shards[key%uint32(len(l.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if lat > 0 {
		s.latencies = append(s.latencies, lat)
	}
	if int(key) >= len(l.counts) || seq >= l.counts[key] {
		s.unknown++
		return
	}
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{seen: make([]uint64, (l.counts[key]+63)/64)}
		s.keys[key] = ks
	}
	word, bit := seq/64, uint64(1)<<(seq%64)
	if ks.seen[word]&bit != 0 {
		s.dups++
		return
	}
	ks.seen[word] |= bit
	if seq < ks.next {
		// A later seq came before this one. (A seq above next skips
		// some: if they come later, they count here then; if never,
		// they are lost, or were dead-lettered.)
		s.order++
	}
	ks.next = max(ks.next, seq+1)
}

// Report is the ledger's verdict.
type Report struct {
	Produced        int           // messages the ledger expects
	Distinct        int           // distinct messages seen
	Lost            int           // produced, never seen
	Duplicates      int           // seen more than once (extra sightings)
	OrderViolations int           // seen out of per-key order
	Unknown         int           // keys or seqs that were never produced
	P50, P99, Max   time.Duration // produce-to-Do latency
}

// Report computes the verdict so far.
func (l *Ledger) Report() Report {
	var r Report
	for _, c := range l.counts {
		r.Produced += int(c)
	}
	var lats []time.Duration
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		r.Duplicates += s.dups
		r.OrderViolations += s.order
		r.Unknown += s.unknown
		for _, ks := range s.keys {
			for _, w := range ks.seen {
				r.Distinct += bits.OnesCount64(w)
			}
		}
		lats = append(lats, s.latencies...)
		s.mu.Unlock()
	}
	r.Lost = r.Produced - r.Distinct
	if len(lats) > 0 {
		slices.Sort(lats)
		r.P50 = lats[len(lats)/2]
		r.P99 = lats[len(lats)*99/100]
		r.Max = lats[len(lats)-1]
	}
	return r
}
