package dispatch

import "math/bits"

// laneSweep is what a partition's growth sweeps (laneFor's, as new keys
// fill the lane table) learn about its keys, to choose which idle lanes
// to drop.
//
// A growth sweep drops every idle lane, unless the keys the previous one
// dropped came back: at least a quarter of the lanes made since were for
// such keys. The partition's working set is then larger than what the
// sweeps leave it (with fast handlers nearly every lane is idle at a
// sweep), and without a change it would make a new lane for nearly every
// message. So that sweep keeps the idle lanes used since the one before
// it, and the table settles at the working set (the next sweep comes at
// twice what a sweep keeps). A stream of ever-new keys shows no returns,
// and its idle lanes keep being dropped: no lane is held for a key that
// never comes again.
//
// The returns are counted with a one-hash Bloom filter of the keys the
// last sweep dropped, 16 bits per key (about 6% of the lanes made for new
// keys count as returns), at most 8 KiB.
type laneSweep struct {
	n         uint32   // growth sweeps so far; a lane's seen is n at its last laneFor
	made      int      // lanes made since the last growth sweep
	back      int      // of them, for keys that sweep dropped (as the filter tells)
	dropped   []uint64 // the filter's bits; empty before the first growth sweep
	shift     uint     // 64 - log2 of its bits
	lanesMade int64    // lanes made in all, for tests
}

const maxSweepFilterWords = 1 << 10 // 65,536 bits

// noteMade counts a lane made for key.
func (w *laneSweep) noteMade(key uint64) {
	w.made++
	w.lanesMade++
	if len(w.dropped) > 0 {
		if i := (key * 0x9E3779B97F4A7C15) >> w.shift; w.dropped[i/64]&(1<<(i%64)) != 0 {
			w.back++
		}
	}
}

// keepRecent reports whether this growth sweep keeps the idle lanes used
// since the last one: the keys that one dropped came back.
func (w *laneSweep) keepRecent() bool { return w.made > 0 && 4*w.back >= w.made }

// resetFilter empties the filter, sized for the drops of a sweep over
// lanes lanes.
func (w *laneSweep) resetFilter(lanes int) {
	words := min(max(1<<bits.Len(uint(lanes*16/64)), 16), maxSweepFilterWords)
	if cap(w.dropped) >= words {
		w.dropped = w.dropped[:words]
		clear(w.dropped)
	} else {
		w.dropped = make([]uint64, words)
	}
	w.shift = uint(64 - bits.TrailingZeros(uint(words*64)))
}

// noteDropped adds key to the filter.
func (w *laneSweep) noteDropped(key uint64) {
	i := (key * 0x9E3779B97F4A7C15) >> w.shift
	w.dropped[i/64] |= 1 << (i % 64)
}

// laneFor returns key's lane, creating one (reusing an idle one) when the
// key has none, and counts an item on its way to it. Only the partition's
// goroutine touches the lane table, so this runs outside the scheduler lock;
// only the sweep of idle lanes, rare, takes it to read lane state.
func (p *Partition[M, T]) laneFor(key uint64) *lane[M, T] {
	l := p.lanes.get(key)
	if l == nil {
		if p.lanes.len() >= p.sweepAt {
			p.sweepLanes(true)
		}
		if n := len(p.freeLanes); n > 0 {
			l = p.freeLanes[n-1]
			p.freeLanes[n-1] = nil
			p.freeLanes = p.freeLanes[:n-1]
			*l = lane[M, T]{}
		} else {
			l = new(lane[M, T])
		}
		l.part = p
		p.lanes.put(key, l)
		p.sweep.noteMade(key)
	}
	l.pending++
	l.seen = p.sweep.n
	return l
}

// sweepLanes drops idle lanes from the lane table, keeping up to
// minLaneSweep of them for reuse. A growth sweep (laneFor's) may keep the
// idle lanes used since the previous one (see laneSweep); Trim's drops
// every idle lane: it runs when keys stopped coming.
func (p *Partition[M, T]) sweepLanes(growth bool) {
	w := &p.sweep
	keep := growth && w.keepRecent()
	if growth {
		w.resetFilter(p.lanes.len())
	}
	p.s.mu.Lock()
	p.lanes.sweep(func(key uint64, l *lane[M, T]) bool {
		if !l.idle() || keep && l.seen == w.n {
			return false
		}
		if growth {
			w.noteDropped(key)
		}
		if len(p.freeLanes) < minLaneSweep {
			p.freeLanes = append(p.freeLanes, l)
		}
		return true
	})
	p.s.mu.Unlock()
	if growth {
		w.n++
		w.made, w.back = 0, 0
	}
	p.sweepAt = max(minLaneSweep, 2*p.lanes.len())
}
