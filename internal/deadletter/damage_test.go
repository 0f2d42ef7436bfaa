package deadletter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// written makes a store in a new directory holding records 0..n-1 and
// returns the directory, the data file's path and each record's
// position, with the end of the file last.
func written(t *testing.T, n int) (dir, path string, pos []int64) {
	t.Helper()
	dir = t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, records(0, n)...)
	pos, _ = scanAll(t, s)
	pos = append(pos, s.Stats().Bytes)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, DataFile), pos
}

// edit changes the file at path with fn.
func edit(t *testing.T, path string, fn func(b []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// openDamaged opens dir with o, collecting what OnDamage reports, and
// returns the records' keys, the damage and the store.
func openDamaged(t *testing.T, dir string, o Options) ([]string, []Damage, *Store) {
	t.Helper()
	var damage []Damage
	o.OnDamage = func(d Damage) { damage = append(damage, d) }
	s := open(t, dir, o)
	damage = nil // what Open found: the Scan below finds it again
	_, recs := scanAll(t, s)
	var keys []string
	for _, r := range recs {
		keys = append(keys, string(r.Key))
	}
	return keys, damage, s
}

func keysExcept(n int, skip ...int) []string {
	var out []string
	for i := range n {
		if !slices.Contains(skip, i) {
			out = append(out, fmt.Sprintf("key-%d", i))
		}
	}
	return out
}

// TestStoreDamage: flipped or missing bytes cost only the records they
// hit: the rest is read, and every damaged stretch is counted and
// reported with the file's path and offset, never a panic or an error.
func TestStoreDamage(t *testing.T) {
	const n = 10
	type damaged struct {
		from, to int // record indexes: the stretch from pos[from] to pos[to]
		reason   string
	}
	tests := []struct {
		name   string
		edit   func(b []byte, pos []int64) []byte
		lost   []int
		damage []damaged
	}{
		{"flipped body byte", func(b []byte, pos []int64) []byte {
			b[pos[4]+frameHeaderSize+5] ^= 0x40
			return b
		}, []int{4}, []damaged{{4, 5, "checksum mismatch"}}},
		{"flipped marker and checksum", func(b []byte, pos []int64) []byte {
			b[pos[2]] ^= 1
			b[pos[7]+9] ^= 0x80
			return b
		}, []int{2, 7}, []damaged{{2, 3, "no record marker"}, {7, 8, "checksum mismatch"}}},
		{"length past the end of the file, body damaged too", func(b []byte, pos []int64) []byte {
			binary.BigEndian.PutUint32(b[pos[3]+4:], 1<<20)
			b[pos[3]+frameHeaderSize+5] ^= 0x40 // else its checksum gives its length (TestStoreMendsDamagedLength)
			return b
		}, []int{3}, []damaged{{3, 4, "runs past the end of the file"}}},
		{"length over the limit, body damaged too", func(b []byte, pos []int64) []byte {
			binary.BigEndian.PutUint32(b[pos[5]+4:], 0xFFFFFFFF)
			b[pos[5]+frameHeaderSize+5] ^= 0x40
			return b
		}, []int{5}, []damaged{{5, 6, "over the limit"}}},
		{"zeroed stretch over two records", func(b []byte, pos []int64) []byte {
			clear(b[pos[1]+3 : pos[3]-1])
			return b
		}, []int{1, 2}, []damaged{{1, 3, "no record marker"}}},
		{"garbage inserted, with a stray marker", func(b []byte, pos []int64) []byte {
			junk := append([]byte("junk"), frameMarker[:]...)
			junk = append(junk, 0, 0, 0, 5, 1, 2, 3, 4, 'x')
			return slices.Insert(b, int(pos[6]), junk...)
		}, nil, []damaged{{6, 6, "no record marker"}}},
		{"bad file header", func(b []byte, pos []int64) []byte {
			b[3] = 'X'
			return b
		}, nil, []damaged{{-1, 0, "bad file header"}}},
		{"garbage tail", func(b []byte, pos []int64) []byte {
			return append(b, "not a record at all"...)
		}, nil, []damaged{{n, n, "no record marker"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path, pos := written(t, n)
			var size int64
			edit(t, path, func(b []byte) []byte {
				b = tt.edit(b, pos)
				size = int64(len(b))
				return b
			})
			for _, o := range []Options{{ReadOnly: true}, {}} {
				keys, damage, s := openDamaged(t, dir, o)
				if want := keysExcept(n, tt.lost...); !slices.Equal(keys, want) {
					t.Errorf("%+v: read %q, want %q", o, keys, want)
				}
				if len(damage) != len(tt.damage) || s.Stats().Damaged != int64(len(tt.damage)) {
					t.Fatalf("%+v: damage %v (Stats.Damaged %d), want %d stretches", o, damage, s.Stats().Damaged, len(tt.damage))
				}
				for i, d := range damage {
					w := tt.damage[i]
					off := int64(0)
					if w.from >= 0 {
						off = pos[w.from]
					}
					if d.Path != path || d.Offset != off || !strings.Contains(d.Reason, w.reason) ||
						(w.to > w.from && d.Length != pos[w.to]-off) || d.Length <= 0 {
						t.Errorf("%+v: damage %+v, want at %s offset %d up to record %d: %s", o, d, path, off, w.to, w.reason)
					}
					if msg := d.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("offset %d", d.Offset)) {
						t.Errorf("damage reads %q: no path or offset", msg)
					}
				}
				if st := s.Stats(); st.TornBytes != 0 || st.Bytes != size {
					t.Errorf("%+v: Stats %+v: damage was cut off or not counted in Bytes (%d)", o, st, size)
				}
				s.Close()
			}
			// A Rewrite leaves the damage out.
			s := open(t, dir, Options{})
			if removed, err := s.Rewrite(func(int64, Record) bool { return true }); removed != 0 || err != nil {
				t.Fatalf("Rewrite: %d, %v", removed, err)
			}
			s.Close()
			keys, damage, _ := openDamaged(t, dir, Options{ReadOnly: true})
			if want := keysExcept(n, tt.lost...); !slices.Equal(keys, want) || len(damage) != 0 {
				t.Errorf("after Rewrite: read %q with damage %v, want %q and none", keys, damage, want)
			}
		})
	}
}

// TestStoreMendsDamagedLength: a record whose length field runs past the
// end of the file is not taken for a torn append, nor lost as damage, when
// its checksum (which covers the length field) holds for the bytes up to
// the end of the file or up to the next record's marker: it is read with
// that length, and a writable Open writes the length back. Also when a
// crash then cut an Append short after a damaged last record: only the
// torn bytes are cut off.
func TestStoreMendsDamagedLength(t *testing.T) {
	const n = 3
	dir, path, pos := written(t, n)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := appendFrame(nil, rec(n))
	if err != nil {
		t.Fatal(err)
	}
	const cut = frameHeaderSize + 10
	for _, tt := range []struct {
		name   string
		record int    // whose length field is damaged
		length uint32 // to this
		torn   []byte // appended after the last record
	}{
		{"last", n - 1, 1 << 20, nil},
		{"last, then a torn append", n - 1, 1 << 20, frame[:cut]},
		{"last, then an append torn in its marker", n - 1, 1 << 20, frame[:1]},
		{"last, then an append torn after 3 bytes", n - 1, 1 << 20, frame[:3]},
		{"not last", 1, 1 << 20, nil},
		{"over the limit", 1, 0xFFFFFFFF, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			damaged := slices.Clone(good)
			binary.BigEndian.PutUint32(damaged[pos[tt.record]+4:], tt.length)
			if err := os.WriteFile(path, append(damaged, tt.torn...), 0o644); err != nil {
				t.Fatal(err)
			}
			keys, damage, ro := openDamaged(t, dir, Options{ReadOnly: true})
			if !slices.Equal(keys, keysExcept(n)) || len(damage) != 0 || ro.Stats().Mended != 1 {
				t.Errorf("read-only: %q, damage %v, Stats %+v; want all %d records, no damage, 1 mended", keys, damage, ro.Stats(), n)
			}
			ro.Close()
			s := open(t, dir, Options{})
			if st := s.Stats(); st.Mended != 1 || st.TornBytes != int64(len(tt.torn)) || st.Records != n || st.Damaged != 0 {
				t.Errorf("writable Open: Stats %+v; want 1 mended, %d torn bytes cut, %d records", st, len(tt.torn), n)
			}
			s.Close()
			if got, err := os.ReadFile(path); err != nil || !slices.Equal(got, good) {
				t.Errorf("after the writable Open the file is not as written (%d bytes, want %d; %v)", len(got), len(good), err)
			}
		})
	}
}

// TestStoreTornTail: an incomplete last record, as a crash during an
// Append leaves it, is not there for a reader (nor damage: a consumer may
// still be writing it), and a writable Open cuts it off; appends go on
// after it.
func TestStoreTornTail(t *testing.T) {
	for _, cut := range []int{1, 3, 4, 7, frameHeaderSize, frameHeaderSize + 10} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			dir, path, pos := written(t, 5)
			frame, err := appendFrame(nil, rec(5))
			if err != nil {
				t.Fatal(err)
			}
			edit(t, path, func(b []byte) []byte { return append(b, frame[:cut]...) })
			keys, damage, ro := openDamaged(t, dir, Options{ReadOnly: true})
			if !slices.Equal(keys, keysExcept(5)) || len(damage) != 0 || ro.Stats().Bytes != pos[5] {
				t.Fatalf("read-only: %q, damage %v, Stats %+v; want 5 records, no damage", keys, damage, ro.Stats())
			}
			s := open(t, dir, Options{})
			if st := s.Stats(); st.TornBytes != int64(cut) || st.Records != 5 || st.Damaged != 0 {
				t.Errorf("writable Open: Stats %+v, want %d torn bytes cut, 5 records", st, cut)
			}
			if fi, _ := os.Stat(path); fi.Size() != pos[5] {
				t.Errorf("file is %d bytes, want %d after the cut", fi.Size(), pos[5])
			}
			mustAppend(t, s, rec(6))
			s.Close()
			keys, damage, _ = openDamaged(t, dir, Options{ReadOnly: true})
			if want := append(keysExcept(5), "key-6"); !slices.Equal(keys, want) || len(damage) != 0 {
				t.Errorf("after an Append: %q, damage %v; want %q", keys, damage, want)
			}
		})
	}
}

// TestStoreBadFiles: a newer version is refused; a file too short for a
// header is damage.
func TestStoreBadFiles(t *testing.T) {
	dir, path, _ := written(t, 2)
	edit(t, path, func(b []byte) []byte {
		h := fileHeader()
		binary.BigEndian.PutUint32(h[8:], 2)
		binary.BigEndian.PutUint32(h[12:], crcOf(h[:12]))
		return append(h, b[fileHeaderSize:]...)
	})
	if _, err := Open(dir, Options{ReadOnly: true}); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), path) {
		t.Errorf("version 2: %v, want ErrVersion naming %s", err, path)
	}
	edit(t, path, func(b []byte) []byte { return b[:5] })
	keys, damage, _ := openDamaged(t, dir, Options{ReadOnly: true})
	if len(keys) != 0 || len(damage) != 1 || damage[0].Length != 5 {
		t.Errorf("5-byte file: %q, damage %v", keys, damage)
	}
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
