package dispatch

// laneSweep is what a partition's lane sweeps learn about its keys, to
// choose which idle lanes to drop and when to sweep next.
//
// A growth sweep (laneFor's, when new keys have filled the lane table to
// sweepAt) drops every idle lane, unless the keys come back: at least a
// quarter of the lane lookups since the last sweep that did not find a
// lane made in that time were for keys that are back after a sweep (a
// lane kept by it, found again, or a new lane for a key a sweep dropped,
// as a Bloom filter of dropped keys tells). The working set is then larger
// than what the sweeps leave (with fast handlers nearly every lane is idle
// at a sweep, and without a change nearly every message would make a new
// lane), so the sweep keeps the idle lanes used since the last one and
// the next comes at twice this one's threshold, up to the growth limit
// (laneGrowthLimit): the table grows until the working set fits (if it
// fits under the limit), and then stops sweeping. A sweep at the limit
// drops every idle lane, so keys that come back a few times and then
// never again cannot grow the table past it. The limit is twice the
// partition's share of MaxInFlight (at least minLaneSweep, at most
// maxLaneSweep), so the idle lanes kept across partitions stay within
// twice MaxInFlight, as the items do within MaxInFlight. Keys that do not
// come back after a sweep show no returns, beyond the filter's false
// positives (about 6%), and have every idle lane dropped.
//
// The filter holds up to sweepFilterKeys keys dropped since it was last
// cleared (it is cleared when full), so the working sets recognised are
// those whose keys come back within about that many drops: up to about
// 7,000 keys in rotation and 25,000 at random. Beyond that, lanes are
// remade, at about 100 ns each.
//
// Trim's sweep (at a commit interval, when the lanes outnumber the
// unfinished items by at least half the lanes and at least minLaneSweep)
// drops every idle lane, adds their keys to the filter and starts the
// counts again: the memory of keys that stopped coming is given back
// within an interval, and a working set that is still coming is remade, a
// lane per key, and recognised again by the filter.
type laneSweep struct {
	n         uint32   // growth sweeps so far; a lane's seen is n at its last laneFor
	made      int      // lanes made since the last growth sweep
	hits      int      // lanes from before it found again (each once)
	ghosts    int      // lanes made for keys in the filter
	dropped   []uint64 // the filter's bits, nil until the first sweep
	filled    int      // keys added since it was last cleared
	lanesMade int64    // lanes made in all, for tests
}

const (
	// maxLaneSweep bounds the growth limit of any partition: about 3 MB
	// of lanes and table slots.
	maxLaneSweep = 1 << 15

	sweepFilterLog  = 17
	sweepFilterBits = 1 << sweepFilterLog // 16 KiB, allocated at a partition's first drop
	// sweepFilterKeys is how many keys the filter takes before it is
	// cleared: 16 bits per key, about 6% false positives when full.
	sweepFilterKeys = sweepFilterBits / 16
)

// filterBit is key's bit in the filter: the top bits of its Fibonacci
// hash, as the lane table's slot is, so a sweep, which visits the table
// in slot order, sets the filter's bits in order.
func filterBit(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> (64 - sweepFilterLog) }

// noteMade counts a lane made for key.
func (w *laneSweep) noteMade(key uint64) {
	w.made++
	w.lanesMade++
	if w.dropped != nil {
		if i := filterBit(key); w.dropped[i/64]&(1<<(i%64)) != 0 {
			w.ghosts++
		}
	}
}

// noteFound records a lookup that found a lane last used when the
// growth sweeps numbered seen.
func (w *laneSweep) noteFound(seen uint32) {
	if seen != w.n {
		w.hits++
	}
}

// keysReturn reports whether a quarter or more of the lookups since the
// last growth sweep that did not find a lane made in that time were for
// keys back after a sweep.
func (w *laneSweep) keysReturn() bool {
	n := w.made + w.hits
	return n > 0 && 4*(w.ghosts+w.hits) >= n
}

// readyFilter allocates the filter before a sweep (outside the scheduler
// lock) if it has none.
func (w *laneSweep) readyFilter() {
	if w.dropped == nil {
		w.dropped = make([]uint64, sweepFilterBits/64)
	}
}

// noteDropped adds key to the filter, clearing it first when it is full.
func (w *laneSweep) noteDropped(key uint64) {
	if w.filled >= sweepFilterKeys {
		clear(w.dropped)
		w.filled = 0
	}
	i := filterBit(key)
	w.dropped[i/64] |= 1 << (i % 64)
	w.filled++
}

// restart starts the counts of lookups again.
func (w *laneSweep) restart() { w.made, w.hits, w.ghosts = 0, 0, 0 }

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
	} else {
		p.sweep.noteFound(l.seen)
	}
	l.pending++
	l.seen = p.sweep.n
	return l
}

// sweepLanes drops idle lanes from the lane table, keeping up to
// minLaneSweep of them for reuse, and sets the table size of the next
// growth sweep. A growth sweep below the growth limit keeps the idle lanes
// used since the last one when keys come back (see laneSweep); Trim's, and
// one at the limit, drop every idle lane.
func (p *Partition[M, T]) sweepLanes(growth bool) {
	w := &p.sweep
	limit := p.laneGrowthLimit()
	keep := growth && p.sweepAt < limit && w.keysReturn()
	w.readyFilter()
	p.s.mu.Lock()
	p.lanes.sweep(func(key uint64, l *lane[M, T]) bool {
		if !l.idle() || keep && l.seen == w.n {
			return false
		}
		w.noteDropped(key)
		if len(p.freeLanes) < minLaneSweep {
			p.freeLanes = append(p.freeLanes, l)
		}
		return true
	})
	p.s.mu.Unlock()
	next := 2 * p.lanes.len()
	if keep {
		next = max(next, min(2*p.sweepAt, limit))
	}
	if growth {
		w.n++
	}
	w.restart()
	p.sweepAt = max(minLaneSweep, next)
}

// laneGrowthLimit is the table size past which growth sweeps keep no idle
// lane: twice the partition's share of MaxInFlight, within [minLaneSweep,
// maxLaneSweep].
func (p *Partition[M, T]) laneGrowthLimit() int {
	return int(min(max(2*p.s.shares.count(), minLaneSweep), maxLaneSweep))
}
