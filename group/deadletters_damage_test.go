package group

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestDamagedLocalStoreLogged: a consumer that opens its local
// dead-letter store finding a damaged record, a record whose length field
// alone is damaged (read by its checksum, and mended) and an incomplete
// last one (a crash during an append) logs each, naming the store's file,
// where the damage is and why; before, it said nothing and only `orderly
// dlq` warned.
func TestDamagedLocalStoreLogged(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	r := newRig(t, "dl-damage", 1, 20, 4)
	cfg := r.config("dl-damage")
	cfg.DataPath = t.TempDir()
	dir := filepath.Join(cfg.DataPath, deadletter.DirName)
	st, err := deadletter.Open(dir, deadletter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(deadletter.Record{Key: []byte("k0"), Value: []byte("v0")}, deadletter.Record{Key: []byte("k1"), Value: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	last := st.Stats().Bytes // where the third record starts
	if err := st.Append(deadletter.Record{Key: []byte("k2"), Value: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, deadletter.DataFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const first = 16                                    // the file header's size: the first record starts there
	b[first+12+3] ^= 0x40                               // a body byte of the first record
	b[last+4] = 0x7f                                    // the third record's length field: its checksum still gives it
	torn := []byte{0xD1, 0xE7, 0x0D, 0x1E, 0, 0, 0, 80} // a frame's marker and length, then the crash
	if err := os.WriteFile(path, append(b, torn...), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs *observer.ObservedLogs
	cfg.Logger, logs = observed()
	runToCommitted(t, r, cfg, r.work(0, 0).Do)

	damaged := logs.FilterMessageSnippet("local dead-letter store damaged").All()
	if len(damaged) != 1 {
		t.Fatalf("damage logs: got %d, want 1", len(damaged))
	}
	f := damaged[0].ContextMap()
	if f["file"] != path || f["destination"] != "local:"+dir || f["file_offset"] != int64(first) || f["damage"] != "checksum mismatch" {
		t.Errorf("damage log fields: got %v, want file %s, destination local:%s, file_offset %d, damage checksum mismatch", f, path, dir, first)
	}
	mended := logs.FilterMessageSnippet("mended the damaged length field").All()
	if len(mended) != 1 || mended[0].ContextMap()["records"] != int64(1) || mended[0].ContextMap()["file"] != path {
		t.Errorf("mended logs: got %v, want one naming %s and 1 record", mended, path)
	}
	cut := logs.FilterMessageSnippet("incomplete last dead letter").All()
	if len(cut) != 1 || cut[0].ContextMap()["file"] != path || cut[0].ContextMap()["bytes"] != int64(len(torn)) {
		t.Errorf("torn-tail logs: got %v, want one naming %s and %d bytes", cut, path, len(torn))
	}
}
