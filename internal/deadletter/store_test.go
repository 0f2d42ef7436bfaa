package deadletter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/flock"
)

// rec is the i-th test record: a dead letter of orders/i%4 at offset i,
// with headers built by Headers.
func rec(i int) Record {
	in := info()
	in.Partition, in.Offset = int32(i%4), int64(i)
	in.Message = fmt.Sprintf("failure %d", i)
	return Record{
		Key:       fmt.Appendf(nil, "key-%d", i),
		Value:     bytes.Repeat([]byte{byte(i)}, i%50),
		Headers:   Headers([]Header{h("trace", fmt.Sprint(i))}, in),
		Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i)).UTC(),
	}
}

// open opens dir and closes it at cleanup unless the test did.
func open(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%s, %+v): %v", dir, o, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close at cleanup: %v", err)
		}
	})
	return s
}

// scanAll returns every record of s, and their positions.
func scanAll(t testing.TB, s *Store) ([]int64, []Record) {
	t.Helper()
	var (
		pos  []int64
		recs []Record
	)
	if err := s.Scan(func(p int64, r Record) error {
		pos, recs = append(pos, p), append(recs, r)
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return pos, recs
}

func mustAppend(t testing.TB, s *Store, recs ...Record) {
	t.Helper()
	if err := s.Append(recs...); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func records(from, to int) []Record {
	var out []Record
	for i := from; i < to; i++ {
		out = append(out, rec(i))
	}
	return out
}

func wantRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s: record %d is\n%+v\nwant\n%+v", what, i, got[i], want[i])
		}
	}
}

// odd are records whose nil and empty parts must come back as they were.
func odd() []Record {
	return []Record{
		{Key: nil, Value: []byte("null key")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte("tombstone"), Value: nil},
		{Key: []byte("empty value"), Value: []byte{}},
		{Key: []byte("headers"), Value: []byte("v"), Headers: []Header{{Key: []byte("null")}, {Key: []byte("empty"), Value: []byte{}}, {Key: []byte{}, Value: []byte("x")}}},
		{Key: []byte("no timestamp")},
		{Key: []byte("nanoseconds"), Timestamp: time.Date(1969, 7, 20, 20, 17, 40, 123456789, time.UTC)},
		{Key: bytes.Repeat([]byte("k"), 300), Value: bytes.Repeat([]byte("v"), 70000)},
	}
}

// TestStoreAppendScanReopen: what Append wrote, Scan reads back as it was
// (nil and empty kept apart), as often as asked, after a reopen too, and
// read-only; Stats count it.
func TestStoreAppendScanReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	s := open(t, dir, Options{})
	want := append(odd(), records(0, 20)...)
	mustAppend(t, s, want[:8]...)
	for _, r := range want[8:] {
		mustAppend(t, s, r)
	}
	pos, got := scanAll(t, s)
	wantRecords(t, "after Append", got, want)
	for i := 1; i < len(pos); i++ {
		if pos[i] <= pos[i-1] {
			t.Fatalf("positions not increasing: %v", pos)
		}
	}
	if _, again := scanAll(t, s); len(again) != len(want) {
		t.Fatalf("a second Scan found %d records: Scan consumed some", len(again))
	}
	fi, err := os.Stat(filepath.Join(dir, DataFile))
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Records != int64(len(want)) || st.Bytes != fi.Size() || st.Damaged != 0 {
		t.Errorf("Stats %+v, want %d records, %d bytes, no damage", st, len(want), fi.Size())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{}, {ReadOnly: true}} {
		s := open(t, dir, o)
		pos2, got := scanAll(t, s)
		wantRecords(t, fmt.Sprintf("reopened %+v", o), got, want)
		if !reflect.DeepEqual(pos2, pos) {
			t.Errorf("reopened %+v: positions %v, want %v", o, pos2, pos)
		}
		if st := s.Stats(); st.Records != int64(len(want)) || st.Bytes != fi.Size() {
			t.Errorf("reopened %+v: Stats %+v", o, st)
		}
		s.Close()
	}
}

// TestStoreConcurrentAppends: 16 goroutines appending at once lose
// nothing, keep each goroutine's order, and share fsyncs.
func TestStoreConcurrentAppends(t *testing.T) {
	sync0 := syncFile
	syncFile = func(f *os.File) error { time.Sleep(2 * time.Millisecond); return sync0(f) }
	defer func() { syncFile = sync0 }()
	s := open(t, t.TempDir(), Options{})
	const writers, appends = 16, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range appends {
				// 1 or 2 records per Append.
				batch := []Record{{Key: fmt.Appendf(nil, "%d/%d/a", w, i)}}
				if i%2 == 1 {
					batch = append(batch, Record{Key: fmt.Appendf(nil, "%d/%d/b", w, i)})
				}
				if err := s.Append(batch...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_, got := scanAll(t, s)
	next := make([]int, writers) // the next Append index expected of each writer
	seen := map[string]bool{}
	for _, r := range got {
		var w, i int
		var part string
		if _, err := fmt.Sscanf(strings.ReplaceAll(string(r.Key), "/", " "), "%d %d %s", &w, &i, &part); err != nil {
			t.Fatalf("record %q: %v", r.Key, err)
		}
		if seen[string(r.Key)] {
			t.Fatalf("record %q twice", r.Key)
		}
		seen[string(r.Key)] = true
		if part == "a" {
			if i != next[w] {
				t.Fatalf("writer %d: Append %d after %d: order lost", w, i, next[w]-1)
			}
			next[w]++
		}
	}
	wantN := writers * (appends + appends/2)
	st := s.Stats()
	if len(got) != wantN || st.Records != int64(wantN) {
		t.Fatalf("%d records (Stats %d), want %d", len(got), st.Records, wantN)
	}
	if st.Syncs >= writers*appends/2 {
		t.Errorf("%d syncs for %d overlapping Appends: no group commit", st.Syncs, writers*appends)
	}
	t.Logf("%d Appends, %d syncs", writers*appends, st.Syncs)
}

// TestStoreRewrite: Rewrite removes what keep rejects and keeps the rest
// in order, also across a reopen; Appends during a Rewrite wait and are
// kept; a Rewrite that removes nothing leaves the file alone.
func TestStoreRewrite(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	all := records(0, 30)
	mustAppend(t, s, all...)
	pos, _ := scanAll(t, s)
	var kept []Record
	var seenPos []int64
	var wg sync.WaitGroup
	removed, err := s.Rewrite(func(p int64, r Record) bool {
		seenPos = append(seenPos, p)
		if len(seenPos) == 1 {
			// Appends that arrive during the Rewrite go after it.
			for i := range 5 {
				wg.Go(func() {
					if err := s.Append(Record{Key: fmt.Appendf(nil, "late-%d", i)}); err != nil {
						t.Error(err)
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
		}
		keep := bytes.HasSuffix(r.Key, []byte("3")) || bytes.HasSuffix(r.Key, []byte("7"))
		if keep {
			kept = append(kept, r)
		}
		return keep
	})
	wg.Wait()
	if err != nil || removed != 24 {
		t.Fatalf("Rewrite: removed %d, %v; want 24 removed", removed, err)
	}
	if !reflect.DeepEqual(seenPos, pos) {
		t.Errorf("keep saw positions %v, want Scan's %v", seenPos, pos)
	}
	_, got := scanAll(t, s)
	wantRecords(t, "after Rewrite", got[:len(kept)], kept)
	if late := got[len(kept):]; len(late) != 5 || !bytes.HasPrefix(late[0].Key, []byte("late-")) {
		t.Fatalf("after Rewrite: %d records after the kept ones, want the 5 late Appends", len(late))
	}
	if st := s.Stats(); st.Records != int64(len(kept)+5) {
		t.Errorf("Stats %+v, want %d records", st, len(kept)+5)
	}
	if _, err := os.Stat(filepath.Join(dir, DataFile+".tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, DataFile))
	if n, err := s.Rewrite(func(int64, Record) bool { return true }); n != 0 || err != nil {
		t.Errorf("Rewrite keeping all: %d, %v", n, err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, DataFile)); !bytes.Equal(before, after) {
		t.Error("a Rewrite that keeps everything changed the file")
	}
	s.Close()
	_, got = scanAll(t, open(t, dir, Options{ReadOnly: true}))
	wantRecords(t, "reopened after Rewrite", got[:len(kept)], kept)
}

// TestStorePurge: Purge removes everything; the store takes Appends after.
func TestStorePurge(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, records(0, 10)...)
	if n, err := s.Purge(); n != 10 || err != nil {
		t.Fatalf("Purge: %d, %v; want 10", n, err)
	}
	if _, got := scanAll(t, s); len(got) != 0 {
		t.Fatalf("%d records after Purge", len(got))
	}
	if st := s.Stats(); st.Records != 0 || st.Bytes != fileHeaderSize {
		t.Errorf("Stats after Purge %+v", st)
	}
	mustAppend(t, s, rec(99))
	s.Close()
	_, got := scanAll(t, open(t, dir, Options{}))
	wantRecords(t, "reopened after Purge and Append", got, []Record{rec(99)})
}

// TestStoreLock: a second writable Open of a directory fails while the
// first holds it, naming the directory and the holder; read-only Opens
// work beside it; Close lets go.
func TestStoreLock(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	mustAppend(t, s, rec(1))
	_, err := Open(dir, Options{})
	var held *flock.HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || !strings.Contains(err.Error(), dir) ||
		!strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second Open: %v; want a *flock.HeldError naming %s and process %d", err, dir, os.Getpid())
	}
	ro := open(t, dir, Options{ReadOnly: true})
	if _, got := scanAll(t, ro); len(got) != 1 {
		t.Errorf("read-only beside the writer: %d records, want 1", len(got))
	}
	mustAppend(t, s, rec(2))
	if _, got := scanAll(t, ro); len(got) != 2 {
		t.Errorf("read-only Scan after another Append: %d records, want 2", len(got))
	}
	s.Close()
	open(t, dir, Options{}).Close()
}

// TestStoreModes: what a read-only, a closed and a missing store say.
func TestStoreModes(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{}).Close()
	ro := open(t, dir, Options{ReadOnly: true})
	if err := ro.Append(rec(1)); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Append: %v", err)
	}
	if _, err := ro.Rewrite(func(int64, Record) bool { return true }); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Rewrite: %v", err)
	}
	if _, err := ro.Purge(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Purge: %v", err)
	}
	s := open(t, dir, Options{})
	s.Close()
	if err := s.Append(rec(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if err := s.Scan(func(int64, Record) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Scan after Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	missing := filepath.Join(dir, "nosuch")
	if _, err := Open(missing, Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("read-only Open of a missing directory: %v", err)
	}
	empty := t.TempDir()
	if _, err := Open(empty, Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no dead-letter store") {
		t.Errorf("read-only Open of a directory without a store: %v", err)
	}
	stop := errors.New("stop")
	s = open(t, dir, Options{})
	mustAppend(t, s, records(0, 3)...)
	n := 0
	if err := s.Scan(func(int64, Record) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("Scan whose fn fails: %v after %d records, want fn's error after 1", err, n)
	}
}

// TestStoreCloseDuringAppends: an Append that Close overtakes either
// returns nil, and its record is there after a reopen, or ErrClosed, and
// it is not.
func TestStoreCloseDuringAppends(t *testing.T) {
	sync0 := syncFile
	syncFile = func(f *os.File) error { time.Sleep(time.Millisecond); return sync0(f) }
	defer func() { syncFile = sync0 }()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done = map[string]bool{}
	)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("%d/%d", w, i)
				err := s.Append(Record{Key: []byte(key)})
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				done[key] = true
				mu.Unlock()
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_, got := scanAll(t, open(t, dir, Options{ReadOnly: true}))
	found := map[string]bool{}
	for _, r := range got {
		found[string(r.Key)] = true
	}
	for k := range done {
		if !found[k] {
			t.Errorf("Append of %s returned nil but the record is not there", k)
		}
	}
	if len(found) != len(done) {
		t.Errorf("%d records in the store, %d Appends returned nil", len(found), len(done))
	}
}
