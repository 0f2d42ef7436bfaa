package dispatch

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestLaneTable checks the lane table against a Go map over keys that are
// hashes, small integers and multiples of a power of two (which collide
// under a mask of the low bits), through growth and sweeps.
func TestLaneTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		key  func(i int) uint64
	}{
		{"hashes", func(int) uint64 { return r.Uint64() }},
		{"small", func(i int) uint64 { return uint64(i) }},
		{"strided", func(i int) uint64 { return uint64(i) << 20 }},
		{"high bits", func(i int) uint64 { return uint64(i) << 56 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab laneTable[msg, int]
			want := map[uint64]*lane[msg, int]{}
			keys := []uint64{}
			for round := range 4 {
				for i := range 3000 {
					k := tc.key(round*3000 + i)
					if _, ok := want[k]; ok {
						continue
					}
					if got := tab.get(k); got != nil {
						t.Fatalf("get(%#x) before put: got a lane, want nil", k)
					}
					l := &lane[msg, int]{n: len(keys)}
					tab.put(k, l)
					want[k] = l
					keys = append(keys, k)
				}
				checkLaneTable(t, &tab, want)
				// Sweep out every lane whose n is odd.
				tab.sweep(func(_ uint64, l *lane[msg, int]) bool { return l.n%2 == 1 })
				for k, l := range want {
					if l.n%2 == 1 {
						delete(want, k)
					}
				}
				checkLaneTable(t, &tab, want)
				for _, k := range keys {
					if _, ok := want[k]; !ok && tab.get(k) != nil {
						t.Fatalf("get(%#x) after its sweep: got a lane, want nil", k)
					}
				}
				// Renumber the survivors so that the next sweep removes half again.
				i := 0
				tab.each(func(l *lane[msg, int]) { l.n = i; i++ })
			}
		})
	}
}

// TestLaneTableGrowsByDoubling: growing doubles the table, at 3/4 load,
// so it is never less than 3/8 full after a growth.
func TestLaneTableGrowsByDoubling(t *testing.T) {
	var tab laneTable[msg, int]
	size := 0
	for i := range 100_000 {
		tab.put(uint64(i), &lane[msg, int]{})
		if n := len(tab.slots); n != size {
			if size != 0 && n != 2*size {
				t.Fatalf("growth at %d lanes: got %d slots from %d, want %d", i+1, n, size, 2*size)
			}
			size = n
		}
		if 8*tab.len() < 3*len(tab.slots) && len(tab.slots) > minLaneSlots {
			t.Fatalf("load at %d lanes: %d slots, want at least 3/8 full", tab.len(), len(tab.slots))
		}
	}
}

// TestLaneTableSweepInPlace: a sweep that keeps most lanes reuses the
// table's array (nothing allocated at each commit interval); one that
// empties it gives the memory back.
func TestLaneTableSweepInPlace(t *testing.T) {
	var tab laneTable[msg, int]
	for i := range 5000 {
		tab.put(uint64(i)*0x9E3779B97F4A7C15, &lane[msg, int]{n: i})
	}
	before := &tab.slots[0]
	tab.sweep(func(_ uint64, l *lane[msg, int]) bool { return l.n%10 == 0 })
	if got := tab.len(); got != 4500 {
		t.Fatalf("lanes after sweeping a tenth: got %d, want 4500", got)
	}
	if &tab.slots[0] != before {
		t.Fatalf("sweeping a tenth reallocated the table, want it swept in place")
	}
	if allocs := testing.AllocsPerRun(10, func() { tab.sweep(func(uint64, *lane[msg, int]) bool { return false }) }); allocs != 0 {
		t.Fatalf("allocations per sweep that keeps every lane: got %v, want 0", allocs)
	}
	tab.sweep(func(uint64, *lane[msg, int]) bool { return true })
	if tab.len() != 0 || len(tab.slots) != minLaneSlots {
		t.Fatalf("after sweeping every lane: got %d lanes in %d slots, want 0 in %d", tab.len(), len(tab.slots), minLaneSlots)
	}
}

func checkLaneTable(t *testing.T, tab *laneTable[msg, int], want map[uint64]*lane[msg, int]) {
	t.Helper()
	if tab.len() != len(want) {
		t.Fatalf("len: got %d, want %d", tab.len(), len(want))
	}
	for k, l := range want {
		if got := tab.get(k); got != l {
			t.Fatalf("get(%#x): got %p, want %p", k, got, l)
		}
	}
	seen := 0
	tab.each(func(*lane[msg, int]) { seen++ })
	if seen != len(want) {
		t.Fatalf("each: got %d lanes, want %d", seen, len(want))
	}
	if 4*tab.len() > 3*len(tab.slots) {
		t.Fatalf("load: %d lanes in %d slots, want at most 3/4", tab.len(), len(tab.slots))
	}
}

// TestLaneTableSweepWraps: a sweep that deletes at the table's last slot
// shifts back entries whose probe wrapped to its start, which the sweep
// passed already; every kept lane is still found and each dropped one is
// gone.
func TestLaneTableSweepWraps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var tab laneTable[msg, int]
	keyAt := func(home uint64) uint64 {
		for {
			if k := r.Uint64(); tab.index(k) == home {
				return k
			}
		}
	}
	tab.put(1<<63, &lane[msg, int]{n: -1}) // sizes the table (minLaneSlots)
	last := uint64(len(tab.slots) - 1)
	var keys []uint64 // five whose home is the last slot, then one whose home is 1
	for range 5 {
		keys = append(keys, keyAt(last))
	}
	keys = append(keys, keyAt(1))
	want := map[uint64]*lane[msg, int]{1 << 63: tab.get(1 << 63)}
	for i, k := range keys {
		l := &lane[msg, int]{n: i}
		tab.put(k, l)
		want[k] = l
	}
	if got := tab.slots[0].key; got != keys[1] {
		t.Fatalf("setup: slot 0 holds %#x, want the second key homed at slot %d (%#x)", got, last, keys[1])
	}
	// Drop the entry at the last slot and one that wrapped.
	drop := map[*lane[msg, int]]bool{want[keys[0]]: true, want[keys[3]]: true}
	tab.sweep(func(_ uint64, l *lane[msg, int]) bool { return drop[l] })
	for _, k := range []uint64{keys[0], keys[3]} {
		if tab.get(k) != nil {
			t.Fatalf("get(%#x) after its sweep: got a lane, want nil", k)
		}
		delete(want, k)
	}
	checkLaneTable(t, &tab, want)
}

// TestLaneFitsCacheLine: a lane takes at most one cache line, 64 bytes,
// so that a lane allocated alone (the 64-byte size class) sits in one.
func TestLaneFitsCacheLine(t *testing.T) {
	const line = 64
	if got := unsafe.Sizeof(lane[msg, int]{}); got > line {
		t.Fatalf("lane size: got %d bytes, want at most %d", got, line)
	}
}
