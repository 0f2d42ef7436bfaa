package dispatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkLaneLookup compares the lane table with the Go map it
// replaced, at the lane count of the pipeline benchmark's partitions
// (10,000 keys over 8 partitions) and at 100k lanes, keys looked up in a
// random order.
func BenchmarkLaneLookup(b *testing.B) {
	for _, n := range []int{1250, 100_000} {
		r := rand.New(rand.NewPCG(1, uint64(n)))
		keys := make([]uint64, n)
		m := make(map[uint64]*lane[msg, int], n)
		var tab laneTable[msg, int]
		for i := range keys {
			keys[i] = r.Uint64()
			l := &lane[msg, int]{}
			m[keys[i]] = l
			tab.put(keys[i], l)
		}
		order := make([]uint64, 1<<16)
		for i := range order {
			order[i] = keys[r.IntN(n)]
		}
		b.Run(fmt.Sprintf("map/%d", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				m[order[i&(len(order)-1)]].n++
			}
		})
		b.Run(fmt.Sprintf("table/%d", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				tab.get(order[i&(len(order)-1)]).n++
			}
		})
	}
}
