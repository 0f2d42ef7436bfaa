package deadletter

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/orderly-go/orderly/internal/tmpfs"
)

// TestStoreFullDisk: an Append the disk has no room for fails with ENOSPC
// naming the file, and is cut off it; once there is room the next Append
// succeeds, and a reopened store holds exactly the records of the Appends
// that returned nil, with no damage.
func TestStoreFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, 1<<20)
	s := open(t, dir, Options{})
	big := func(i int) Record { // more than a page: the file's first page cannot take it
		r := rec(i)
		r.Value = bytes.Repeat([]byte{byte(i)}, 6000)
		return r
	}
	mustAppend(t, s, big(0))
	filler := tmpfs.Fill(t, dir, 0)
	for i := 1; i <= 3; i++ {
		if err := s.Append(big(i)); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), s.path) {
			t.Fatalf("Append %d on a full disk: got %v, want ENOSPC naming %s", i, err, s.path)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
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
