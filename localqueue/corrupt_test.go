package localqueue

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Corrupt-file layout: 100-byte bodies make 145-byte envelopes and
// 149-byte go-diskqueue records; 745-byte files hold five records each, so
// 20 messages fill data files 0 to 3.
const (
	corruptBody    = 100
	corruptRecord  = 4 + envelopeOverhead + corruptBody
	corruptPerFile = 5
	corruptN       = 20
)

func corruptBodyOf(i int) string { return fmt.Sprintf("%-*s", corruptBody, fmt.Sprintf("m%02d", i)) }

func TestCorruptFiles(t *testing.T) {
	tests := []struct {
		name    string
		file    int // data file to damage
		damage  func(t *testing.T, path string)
		lost    []int  // message numbers that cannot come back
		decode  uint64 // want Stats.DecodeErrors
		badFile bool   // go-diskqueue renames the file to .bad
	}{
		{
			name: "bad length prefix", file: 1, badFile: true,
			damage: func(t *testing.T, path string) {
				writeAt(t, path, 2*corruptRecord, binary.BigEndian.AppendUint32(nil, 0xffffffff))
			},
			lost: []int{7, 8, 9}, // the rest of the file: no way to find the next record
		},
		{
			name: "length prefix below the envelope", file: 2, badFile: true,
			damage: func(t *testing.T, path string) { writeAt(t, path, 0, binary.BigEndian.AppendUint32(nil, 10)) },
			lost:   []int{10, 11, 12, 13, 14},
		},
		{
			name: "truncated tail", file: 3, badFile: true,
			damage: func(t *testing.T, path string) {
				if err := os.Truncate(path, 4*corruptRecord+10); err != nil {
					t.Fatalf("truncate: %v", err)
				}
			},
			lost: []int{19},
		},
		{
			name: "garbage envelope", file: 2, decode: 1,
			damage: func(t *testing.T, path string) {
				writeAt(t, path, corruptRecord+4+envelopeHeader+10, []byte("garbage"))
			},
			lost: []int{11},
		},
		{
			name: "unknown envelope version", file: 0, decode: 1,
			damage: func(t *testing.T, path string) { writeAt(t, path, 3*corruptRecord+4, []byte{99}) },
			lost:   []int{3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			o := Options{DataPath: dir, MaxMsgSize: corruptBody, MaxBytesPerFile: corruptPerFile * corruptRecord}
			q := openQueue(t, o)
			for i := range corruptN {
				mustPut(t, q, corruptBodyOf(i))
			}
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			path := filepath.Join(dir, fmt.Sprintf("q.diskqueue.%06d.dat", tt.file))
			tt.damage(t, path)

			core, logs := observer.New(zapcore.DebugLevel)
			o.Logger = zap.New(core)
			q = openQueue(t, o)
			var got []int
			for _, m := range drain(t, q) {
				var i int
				fmt.Sscanf(string(m.Body), "m%d", &i)
				got = append(got, i)
				mustFinish(t, q, m.ID)
			}
			var want []int
			for i := range corruptN {
				if !slices.Contains(tt.lost, i) {
					want = append(want, i)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("messages after damage: got %v, want %v", got, want)
			}

			st := q.Stats()
			if st.DecodeErrors != tt.decode {
				t.Errorf("DecodeErrors: got %d, want %d", st.DecodeErrors, tt.decode)
			}
			if tt.badFile && st.BackendErrors == 0 {
				t.Errorf("BackendErrors: got 0, want the corrupt file counted")
			}
			if !logsName(logs, path, zapcore.ErrorLevel) {
				t.Errorf("logs: got %v, want an error naming %s", messages(logs), path)
			}
			if _, err := os.Stat(path + ".bad"); tt.badFile && err != nil {
				t.Errorf("bad file: got %v, want %s.bad kept for inspection", err, path)
			}

			// The queue keeps working.
			for i := range 3 {
				mustPut(t, q, fmt.Sprintf("after-%d", i))
			}
			for i := range 3 {
				m := mustGet(t, q)
				if want := fmt.Sprintf("after-%d", i); string(m.Body) != want {
					t.Fatalf("Get after recovery: got %q, want %q", m.Body, want)
				}
				mustFinish(t, q, m.ID)
			}
		})
	}
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// logsName reports whether a log entry at level names path, in its message
// or a field.
func logsName(logs *observer.ObservedLogs, path string, level zapcore.Level) bool {
	for _, e := range logs.FilterLevelExact(level).All() {
		if strings.Contains(e.Message, path) {
			return true
		}
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && s == path {
				return true
			}
		}
	}
	return false
}

func messages(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		if e.Level >= zapcore.WarnLevel {
			out = append(out, fmt.Sprintf("%s %s %v", e.Level, e.Message, e.ContextMap()))
		}
	}
	return out
}
