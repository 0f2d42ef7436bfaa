package group

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHistorySaveRetries: a save that fails (here its temporary file
// cannot be created: a directory is in the way) names the file, and the
// record stays unsaved, so the next save writes it.
func TestHistorySaveRetries(t *testing.T) {
	dir := t.TempDir()
	h, err := loadHistory("g", dir)
	if err != nil {
		t.Fatal(err)
	}
	h.seen(topicPartition{"t", 3}, 42)
	blocker := filepath.Join(dir, historyFile+".tmp")
	if err := os.Mkdir(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	err = h.save()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, historyFile)) {
		t.Fatalf("save with %s a directory: got %v, want an error naming %s", blocker, err, historyFile)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := h.save(); err != nil {
		t.Fatalf("save after the failure: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, historyFile))
	if err != nil {
		t.Fatalf("after the second save: %v", err)
	}
	var rec historyRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Group != "g" || rec.Offsets["t"]["3"] != 42 {
		t.Fatalf("%s: got %s (%v), want group g, t/3 at 42", historyFile, b, err)
	}
}
