package localqueue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestDamagedMetadata replaces go-diskqueue's metadata file of a closed
// queue (20 messages in data files 0 to 3, the first two finished, so the
// reader is at file 0, offset 2 records) with garbage. Open must rebuild
// it from the data files: every message not finished comes back once (and
// the two finished ones too when the read position is lost with the rest),
// new messages never overwrite the old data files, and the damage is
// logged with the path and counted.
func TestDamagedMetadata(t *testing.T) {
	const (
		size  = corruptPerFile * corruptRecord // of each data file
		read  = 2 * corruptRecord              // the reader's position in file 0
		depth = corruptN - 2
	)
	tests := []struct {
		name string
		meta string
		// keepsRead: the damaged file still names a read position that
		// fits the data files, so the finished messages stay behind it
		keepsRead bool
	}{
		{name: "empty", meta: ""},
		{name: "truncated after the read position", meta: fmt.Sprintf("%d\n0,%d\n", depth, read), keepsRead: true},
		{name: "truncated in the read position", meta: fmt.Sprintf("%d\n0,", depth)},
		{name: "not numbers", meta: "depth\nread,pos\nwrite,pos\n"},
		{name: "negative numbers", meta: fmt.Sprintf("-3\n0,%d\n-1,-5\n", read), keepsRead: true},
		{name: "absurd depth", meta: fmt.Sprintf("9223372036854775807\n0,%d\n3,%d\n", read, size), keepsRead: true},
		{name: "absurd write file", meta: fmt.Sprintf("%d\n0,%d\n999999,0\n", depth, read), keepsRead: true},
		{name: "read position past the file end", meta: fmt.Sprintf("%d\n0,%d\n3,%d\n", depth, 100*size, size)},
		{name: "write position past the file end", meta: fmt.Sprintf("%d\n0,%d\n3,%d\n", depth, read, 100*size), keepsRead: true},
		{name: "read behind write", meta: fmt.Sprintf("%d\n3,0\n0,%d\n", depth, read)},
		{name: "read file not the first", meta: fmt.Sprintf("%d\n1,0\n3,%d\n", depth, size)},
	}
	o := Options{DataPath: t.TempDir(), MaxMsgSize: corruptBody, MaxBytesPerFile: size}
	q := openQueue(t, o)
	for i := range corruptN {
		mustPut(t, q, corruptBodyOf(i))
	}
	for range 2 {
		mustFinish(t, q, mustGet(t, q).ID)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	template := o.DataPath

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyFiles(t, template)
			meta := filepath.Join(dir, "q.diskqueue.meta.dat")
			if err := os.WriteFile(meta, []byte(tt.meta), 0o600); err != nil {
				t.Fatalf("write %s: %v", meta, err)
			}
			data := dataFileContents(t, dir)
			if len(data) != 4 {
				t.Fatalf("data files before Open: got %d, want 4", len(data))
			}
			first := 2
			if !tt.keepsRead {
				first = 0
			}
			var want []string
			for i := first; i < corruptN; i++ {
				want = append(want, corruptBodyOf(i))
			}

			core, logs := observer.New(zapcore.DebugLevel)
			o := Options{DataPath: dir, MaxMsgSize: corruptBody, MaxBytesPerFile: size, Logger: zap.New(core)}
			q := openQueue(t, o)
			if got := q.Depth(); got != int64(len(want)) {
				t.Errorf("Depth after Open: got %d, want %d", got, len(want))
			}
			if got := q.Stats().MetadataCorrupt; got != 1 {
				t.Errorf("Stats.MetadataCorrupt: got %d, want 1", got)
			}
			if !logsName(logs, meta, zapcore.ErrorLevel) {
				t.Errorf("logs: got %v, want an error naming %s", messages(logs), meta)
			}

			for i := range 3 { // written after the old records, never over them
				body := fmt.Sprintf("after-%d", i)
				mustPut(t, q, body)
				want = append(want, body)
			}
			for name, old := range data {
				if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, old) {
					t.Fatalf("data file %s after Open and 3 Puts: got %d bytes (error %v), want its %d bytes unchanged", name, len(b), err, len(old))
				}
			}
			var got []string
			for _, m := range drain(t, q) {
				got = append(got, string(m.Body))
				mustFinish(t, q, m.ID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("messages after Open:\n got %q\nwant %q", got, want)
			}

			// The rebuilt metadata is good: a clean restart brings nothing back.
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			o.Logger = nil
			q = openQueue(t, o)
			if m := tryGet(t, q, 50*time.Millisecond); m != nil {
				t.Fatalf("after a drained restart: got %q, want nothing", m.Body)
			}
			if got := q.Stats().MetadataCorrupt; got != 0 {
				t.Errorf("Stats.MetadataCorrupt after a clean restart: got %d, want 0", got)
			}
		})
	}
}

// copyFiles copies the regular files of dir, a closed queue's DataPath,
// to a new directory.
func copyFiles(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("copy %s: %v", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("copy %s: %v", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatalf("copy %s: %v", dir, err)
		}
	}
	return dst
}

// dataFileContents returns the contents of the go-diskqueue data files of
// queue "q" in dir, by file name.
func dataFileContents(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	nums, err := dataFiles(dir, "q")
	if err != nil {
		t.Fatalf("list data files: %v", err)
	}
	out := map[string][]byte{}
	for _, n := range nums {
		name := fmt.Sprintf("q.diskqueue.%06d.dat", n)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		out[name] = b
	}
	return out
}

// TestStaleMetadataIsNotDamage: metadata that a kill -9 left behind its
// data files is recovered, not reported as damaged, and metadata that fits
// is left alone. Records here are 100 bytes, length prefix included.
func TestStaleMetadataIsNotDamage(t *testing.T) {
	const rec = 100
	tests := []struct {
		name  string
		files map[int64]int // data file number: records in it
		meta  string
		want  string // the metadata after prepareMetadata
	}{
		{
			name: "fits", files: map[int64]int{0: 3}, meta: "2\n0,100\n0,300\n",
			want: "2\n0,100\n0,300\n",
		},
		{
			name: "write file grew", files: map[int64]int{0: 3}, meta: "1\n0,100\n0,200\n",
			want: "2\n0,100\n1,0\n",
		},
		{
			name: "data file after the write file", files: map[int64]int{0: 2, 1: 1}, meta: "2\n0,0\n0,200\n",
			want: "3\n0,0\n2,0\n",
		},
		{
			// The reader finished file 0 and removed it; the depth still
			// counts the 5 records it read there since the last sync.
			name: "read file gone", files: map[int64]int{1: 2}, meta: "7\n0,100\n1,200\n",
			want: "2\n1,0\n2,0\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, k := range tt.files {
				var b []byte
				for range k {
					b = binary.BigEndian.AppendUint32(b, rec-4)
					b = append(b, make([]byte, rec-4)...)
				}
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("q.diskqueue.%06d.dat", n)), b, 0o600); err != nil {
					t.Fatalf("write data file: %v", err)
				}
			}
			meta := filepath.Join(dir, "q.diskqueue.meta.dat")
			if err := os.WriteFile(meta, []byte(tt.meta), 0o600); err != nil {
				t.Fatalf("write %s: %v", meta, err)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			damaged, err := prepareMetadata(dir, "q", 4+envelopeOverhead, zap.New(core))
			if err != nil || damaged {
				t.Fatalf("prepareMetadata: got damaged %v, error %v, want neither (logs %v)", damaged, err, messages(logs))
			}
			if got, err := os.ReadFile(meta); err != nil || string(got) != tt.want {
				t.Fatalf("metadata: got %q (error %v), want %q", got, err, tt.want)
			}
			if errs := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); errs != 0 {
				t.Fatalf("logs: got %v, want no error", messages(logs))
			}
		})
	}
}
