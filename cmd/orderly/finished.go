package main

import "sync"

// finished records the offsets of this run's records that the group has
// finished: booked by a successful Do, or skipped because New could not
// decode them. A record behind a committed offset that is not finished is
// lost; that is the report's "lost", whether the run completed or was
// interrupted (records never produced, or produced and not yet handled,
// are above the committed offsets and never count).
type finished struct {
	parts map[int32]*finishedPart // one per partition at the start; fixed after newFinished
}

type finishedPart struct {
	mu    sync.Mutex
	start int64    // the partition's offset before producing
	bits  []uint64 // bit i: offset start+i is finished
}

func newFinished(start map[int32]int64) *finished {
	f := &finished{parts: make(map[int32]*finishedPart, len(start))}
	for p, off := range start {
		f.parts[p] = &finishedPart{start: off}
	}
	return f
}

// mark notes that offset off of partition p is finished. Offsets below
// the start, and partitions created after it, are not this run's records:
// they are not tracked, and missing counts them as not finished.
func (f *finished) mark(p int32, off int64) {
	fp := f.parts[p]
	if fp == nil || off < fp.start {
		return
	}
	i := off - fp.start
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for int64(len(fp.bits)) <= i/64 {
		fp.bits = append(fp.bits, 0)
	}
	fp.bits[i/64] |= 1 << (i % 64)
}

// missing counts the records in [start[p], upTo[p]) of every partition in
// upTo that are not marked finished.
func (f *finished) missing(start, upTo map[int32]int64) int64 {
	var n int64
	for p, end := range upTo {
		from := start[p]
		fp := f.parts[p]
		if fp == nil {
			n += max(end-from, 0)
			continue
		}
		fp.mu.Lock()
		for off := from; off < end; off++ {
			i := off - fp.start
			if i < 0 || i/64 >= int64(len(fp.bits)) || fp.bits[i/64]&(1<<(i%64)) == 0 {
				n++
			}
		}
		fp.mu.Unlock()
	}
	return n
}
