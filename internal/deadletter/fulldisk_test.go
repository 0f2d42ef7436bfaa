package deadletter

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/orderly-go/orderly/internal/tmpfs"
)

// TestStoreFullDisk: an Append the disk has no room for fails with ENOSPC
// naming the file, and is cut off it; once there is room a Rewrite and the
// next Append succeed, and a reopened store holds exactly the records of
// the Appends that returned nil, with no damage.
func TestStoreFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	s := open(t, dir, Options{})
	big := func(i int) Record { // more than a page: the file's first page cannot take it
		r := rec(i)
		r.Value = bytes.Repeat([]byte{byte(i)}, 6000)
		return r
	}
	mustAppend(t, s, big(0))
	ballast := tmpfs.Fill(t, dir, 0)
	for i := 1; i <= 3; i++ {
		if err := s.Append(big(i)); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), s.path) {
			t.Fatalf("Append %d on a full disk: got %v, want ENOSPC naming %s", i, err, s.path)
		}
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	// The failed writes left nothing to refuse: a Rewrite goes ahead.
	if removed, err := s.Rewrite(func(int64, Record) bool { return true }); removed != 0 || err != nil {
		t.Fatalf("Rewrite keeping everything after the failed Appends: got %d removed, %v; want 0, nil", removed, err)
	}
	mustAppend(t, s, big(4), big(5))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := open(t, dir, Options{ReadOnly: true})
	_, got := scanAll(t, r)
	wantRecords(t, "after a full disk", got, []Record{big(0), big(4), big(5)})
	if st := r.Stats(); st.Damaged != 0 || st.TornBytes != 0 {
		t.Fatalf("reopened: %d damaged, %d torn bytes; want none", st.Damaged, st.TornBytes)
	}
}

// TestStoreFullDiskConcurrent: Appends from several goroutines while the
// disk fills and then has room again. The store holds the records of
// exactly the Appends that returned nil: none of one that failed (a write
// that fails fails only the Appends it carried; those queued behind it
// are written by a write of their own), and no damage.
func TestStoreFullDiskConcurrent(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	s := open(t, dir, Options{})
	big := func(i int) Record {
		r := rec(i)
		r.Value = bytes.Repeat([]byte{byte(i)}, 6000)
		return r
	}
	ballast := tmpfs.Fill(t, dir, 0)
	const writers, each = 8, 40
	var mu sync.Mutex
	var failures int
	room := make(chan struct{})
	stored := map[string]bool{}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for k := range each {
				r := big(g*each + k)
				err := s.Append(r)
				mu.Lock()
				switch {
				case err == nil:
					stored[string(r.Key)] = true
				case errors.Is(err, syscall.ENOSPC):
					if failures++; failures == 20 {
						close(room)
					}
				default:
					t.Errorf("Append: %v", err)
				}
				mu.Unlock()
			}
		})
	}
	<-room
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := open(t, dir, Options{ReadOnly: true})
	_, got := scanAll(t, r)
	found := map[string]bool{}
	for _, rec := range got {
		k := string(rec.Key)
		if !stored[k] || found[k] {
			t.Fatalf("record %s in the store: its Append returned an error, or it is there twice", k)
		}
		found[k] = true
	}
	if len(found) != len(stored) || r.Stats().Damaged != 0 {
		t.Fatalf("store: %d records (%d damaged), want the %d whose Append returned nil", len(found), r.Stats().Damaged, len(stored))
	}
	t.Logf("%d Appends failed, %d succeeded", failures, len(stored))
}

// TestStoreFullDiskFailedWritesForgotten: on a disk that stays full,
// writers that keep appending keep failing; the store remembers a failed
// write only until each Append it carried has returned, so what it holds
// stays within the number of Appends under way however long that lasts.
func TestStoreFullDiskFailedWritesForgotten(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	s := open(t, dir, Options{})
	tmpfs.Fill(t, dir, 0)
	const writers, each = 8, 2000
	var most atomic.Int64
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for k := range each {
				r := rec(g*each + k)
				r.Value = bytes.Repeat([]byte{byte(k)}, 6000)
				if err := s.Append(r); !errors.Is(err, syscall.ENOSPC) {
					t.Errorf("Append on a full disk: got %v, want ENOSPC", err)
					return
				}
				s.mu.Lock()
				n := int64(len(s.failed))
				s.mu.Unlock()
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got > writers {
		t.Fatalf("failed writes remembered at once by %d writers: got up to %d, want at most %d", writers, got, writers)
	}
	t.Logf("failed writes remembered at once: at most %d", most.Load())
}
