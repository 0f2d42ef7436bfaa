package localqueue

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func journalSeeds() [][]byte {
	m := sampleMessage("body", 2)
	return [][]byte{
		appendCopy(nil, stateInFlight, m),
		appendCopy(nil, stateDeferred, sampleMessage("", 0)),
		appendMove(nil, stateReady, m.ID, 3, time.Unix(5, 6)),
		appendFin(nil, m.ID),
		appendSwap(nil, stateDeferred, m.ID, sampleMessage("new", 0)),
		appendHist(nil, m.ID),
		appendIDRecordOfKind(4, sampleMessage("", 0).ID), // unused kind: corrupt
		{0, 0, 0, 2, 1, 2, 3, 4, 1, 3},
		nil,
	}
}

// FuzzJournalRecord: the decoder never panics or reads past its input,
// and whatever it accepts encodes back to the same bytes.
func FuzzJournalRecord(f *testing.F) {
	for _, s := range journalSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r jrec
		n, err := decodeJournalRecord(b, &r)
		if err != nil {
			if !errors.Is(err, ErrCorruptJournal) {
				t.Fatalf("error %v does not wrap ErrCorruptJournal", err)
			}
			return
		}
		if n < recordHeaderSize || n > len(b) {
			t.Fatalf("size %d for %d bytes of input", n, len(b))
		}
		var again []byte
		switch r.kind {
		case kindCopy:
			again = appendCopy(nil, r.state, &r.m)
		case kindSwap:
			again = appendSwap(nil, r.state, r.replaced, &r.m)
		case kindMove:
			again = appendMove(nil, r.state, r.id, r.attempts, r.due)
		case kindFin:
			again = appendFin(nil, r.id)
		case kindHist:
			again = appendHist(nil, r.id)
		default:
			t.Fatalf("accepted unknown kind %d", r.kind)
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding: got %x, want %x", again, b[:n])
		}
	})
}

// FuzzJournalReplay: replay of any file never panics or fails on readable
// input, and every message it restores points at a COPY record.
func FuzzJournalReplay(f *testing.F) {
	var all []byte
	for _, s := range journalSeeds() {
		all = append(all, s...)
	}
	f.Add(append(journalHeader(), all...))
	f.Add(append(journalHeader(), all[:len(all)-3]...))
	f.Add(all)
	f.Fuzz(func(t *testing.T, b []byte) {
		rp, err := replay(bytes.NewReader(b), int64(len(b)), 1<<16)
		if err != nil {
			t.Fatalf("replay of readable bytes: %v", err)
		}
		for id, e := range rp.live {
			var r jrec
			if e.off < 0 || e.off+int64(e.size) > int64(len(b)) {
				t.Fatalf("%s at %d+%d, outside %d bytes", id, e.off, e.size, len(b))
			}
			if _, err := decodeJournalRecord(b[e.off:e.off+int64(e.size)], &r); err != nil || (r.kind != kindCopy && r.kind != kindSwap) || r.id != id {
				t.Fatalf("%s at %d: got %+v, %v, want its COPY or SWAP", id, e.off, r, err)
			}
		}
	})
}
