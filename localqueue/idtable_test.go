package localqueue

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestIDTable runs random puts, gets and removes against a map, with IDs
// shaped as the queue makes them (a few prefixes, sequential numbers) and
// with IDs forced into the same home slots.
func TestIDTable(t *testing.T) {
	tests := []struct {
		name  string
		steps int
		id    func(rng *rand.Rand, seq uint64) ID
	}{
		{"sequential", 20000, func(rng *rand.Rand, seq uint64) ID {
			var id ID
			binary.BigEndian.PutUint64(id[:8], uint64(rng.IntN(3))+0xabcdef)
			binary.BigEndian.PutUint64(id[8:], seq)
			return id
		}},
		{"random", 20000, func(rng *rand.Rand, seq uint64) ID {
			var id ID
			binary.BigEndian.PutUint64(id[:8], rng.Uint64())
			binary.BigEndian.PutUint64(id[8:], rng.Uint64())
			return id
		}},
		{"colliding", 3000, func(rng *rand.Rand, seq uint64) ID { // one long probe run: quadratic
			// The same value in both halves hashes every ID to slot 0.
			var id ID
			binary.BigEndian.PutUint64(id[:8], seq)
			binary.BigEndian.PutUint64(id[8:], seq<<31|seq>>33)
			return id
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			tab, ref := newIDTable(), map[ID]*record{}
			var ids []ID
			for step := range tt.steps {
				switch op := rng.IntN(10); {
				case op < 5 || len(ids) == 0:
					id := tt.id(rng, uint64(step+1))
					if ref[id] != nil {
						continue
					}
					r := newRecord(Message{ID: id})
					tab.put(r)
					ref[id] = r
					ids = append(ids, id)
				case op < 8:
					k := rng.IntN(len(ids))
					id := ids[k]
					ids[k] = ids[len(ids)-1]
					ids = ids[:len(ids)-1]
					if got := tab.remove(id); got != ref[id] {
						t.Fatalf("step %d: remove: got %p, want %p", step, got, ref[id])
					}
					delete(ref, id)
					if got := tab.remove(id); got != nil {
						t.Fatalf("step %d: second remove: got %p, want nil", step, got)
					}
				default:
					id := tt.id(rng, uint64(step+1))
					if len(ids) > 0 && rng.IntN(2) == 0 {
						id = ids[rng.IntN(len(ids))]
					}
					if got := tab.get(id); got != ref[id] {
						t.Fatalf("step %d: get: got %p, want %p", step, got, ref[id])
					}
				}
				if tab.len() != len(ref) {
					t.Fatalf("step %d: len: got %d, want %d", step, tab.len(), len(ref))
				}
			}
			for id, r := range ref {
				if got := tab.get(id); got != r {
					t.Fatalf("final get: got %p, want %p", got, r)
				}
			}
			tab.reset()
			if tab.len() != 0 || tab.get(ids[0]) != nil {
				t.Fatalf("after reset: got len %d, want an empty table", tab.len())
			}
		})
	}
}
