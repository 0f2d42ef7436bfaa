package deadletter

import (
	"bytes"
	"reflect"
	"testing"
)

// The seed corpora are in testdata/fuzz (go test runs them; go test
// -fuzz=FuzzDecodeBody or -fuzz=FuzzScan explores from them); the f.Add
// seeds below are the same kinds of input built from the encoder.

// FuzzDecodeBody: any bytes decode to a record or an error, never a
// panic, and a record that decodes encodes to bytes that decode to it
// again.
func FuzzDecodeBody(f *testing.F) {
	for _, r := range append(odd(), rec(1), rec(49)) {
		f.Add(appendBody(nil, r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeBody(b)
		if err != nil {
			return
		}
		again, err := decodeBody(appendBody(nil, r))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", r, again)
		}
	})
}

// FuzzScan: a scan of any file never panics, and accounts for every byte:
// the header, records, damaged stretches and an incomplete tail follow
// each other without gaps or overlaps up to the end of the file.
func FuzzScan(f *testing.F) {
	file := fileHeader()
	for _, r := range append(odd()[:5], rec(3), rec(4)) {
		file, _ = appendFrame(file, r)
	}
	f.Add(file)
	f.Add(file[:len(file)-7])
	flipped := bytes.Clone(file)
	flipped[40] ^= 0xff
	f.Add(flipped)
	f.Add([]byte("ORDLYDLQ"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc := &fileScanner{r: bytes.NewReader(b), path: "fuzz", size: int64(len(b))}
		at := int64(fileHeaderSize)
		if ok, _ := checkFileHeader(b); !ok {
			at = 0
		}
		var records int64
		res, err := sc.scan(func(pos int64, raw []byte, _ Record) error {
			if pos != at {
				t.Fatalf("record at %d, want it at %d", pos, at)
			}
			records++
			at += int64(len(raw))
			return nil
		}, func(d Damage) {
			if d.Offset != at || d.Length <= 0 {
				t.Fatalf("damage %+v, want it at %d", d, at)
			}
			at += d.Length
		})
		if err != nil {
			if _, verr := checkFileHeader(b); verr == nil {
				t.Fatalf("scan: %v", err)
			}
			return // a newer version
		}
		switch {
		case res.records != records:
			t.Fatalf("%d records counted, %d yielded", res.records, records)
		case res.tail >= 0 && res.tail != at:
			t.Fatalf("tail at %d, want it at %d", res.tail, at)
		case res.tail < 0 && at != int64(len(b)):
			t.Fatalf("scan accounted for %d of %d bytes", at, len(b))
		}
	})
}
