package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
)

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is the example's main running in a process of its own.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{} // closed when it has exited
	err            error         // Wait's, once done
}

// startMain runs the example's main in a process of its own; it is killed
// at the end of the test if it still runs.
func startMain(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), asMain+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// appliedSoFar sums the transfers applied in the database at path (0
// while it does not exist yet).
func appliedSoFar(t *testing.T, path string) int {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return 0
	}
	st, err := openStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	accts, err := st.accounts(context.Background())
	if err != nil {
		return 0 // the tables are being created
	}
	n := 0
	for _, a := range accts {
		n += a.applied
	}
	return n
}

var skippedRE = regexp.MustCompile(`redelivered and skipped (\d+)`)

// TestLedgerKilled kills the ledger (ordered mode, its own process) with
// SIGKILL after it applied a quarter of the transfers and before any
// commit (--commit-interval 30s), then runs it again: Kafka delivers every
// transfer again, the second run skips exactly the ones the first one had
// applied (the per-account offsets in the database say so), and in the
// end every account's balance in the database equals the sum of its
// transfers, each applied once, and no balance ever went negative.
func TestLedgerKilled(t *testing.T) {
	t.Parallel()
	const n, accounts, seed = 6000, 50, 3
	b, err := broker.Start(broker.Config{Topics: []string{"transfers"}, Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ts := plan(n, accounts, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := produce(ctx, b.Addrs(), "transfers", ts); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "ordered.db")
	args := []string{"--brokers", b.Addrs()[0], "--mode", "ordered", "--db", dir, "--group", "crash",
		"--transfers", strconv.Itoa(n), "--accounts", strconv.Itoa(accounts), "--seed", strconv.Itoa(seed)}

	first := startMain(t, append(args, "--commit-interval", "30s")...)
	out1, err1 := &first.stdout, &first.stderr
	deadline := time.Now().Add(90 * time.Second)
	for appliedSoFar(t, db) < n/4 {
		select {
		case <-first.done:
			t.Fatalf("the first run ended before it was killed (%v)\nstdout:\n%s\nstderr:\n%s", first.err, out1, err1)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first run applied %d transfers in 90s, want %d\nstdout:\n%s\nstderr:\n%s", appliedSoFar(t, db), n/4, out1, err1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	before := appliedSoFar(t, db)
	if c := b.Committed("crash-ordered", "transfers"); len(c) > 0 || before >= n {
		t.Fatalf("at the kill: committed %v, applied %d of %d; want nothing committed and work left", c, before, n)
	}

	second := startMain(t, args...)
	out2, err2 := &second.stdout, &second.stderr
	select {
	case <-second.done:
		if second.err != nil {
			t.Fatalf("second run: %v\nstdout:\n%s\nstderr:\n%s", second.err, out2, err2)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("second run did not catch up in 2 minutes\nstdout:\n%s\nstderr:\n%s", out2, err2)
	}
	m := skippedRE.FindStringSubmatch(out2.String())
	if m == nil {
		t.Fatalf("second run printed no skipped count:\n%s", out2)
	}
	t.Logf("killed after %d of %d transfers applied, nothing committed; the second run skipped %s", before, n, m[1])
	if skipped, _ := strconv.Atoi(m[1]); skipped != before {
		t.Errorf("second run skipped %d redelivered transfers, want %d: the ones applied before the kill", skipped, before)
	}

	st, err := openStore(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	accts, err := st.accounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, count := sums(ts)
	if len(accts) != len(want) {
		t.Errorf("got %d accounts in the database, want %d", len(accts), len(want))
	}
	for id, bal := range want {
		a := accts[id]
		if a.balance != bal || a.applied != count[id] || a.minBalance < 0 {
			t.Errorf("account %s: balance %d from %d transfers, lowest %d; want %d from %d, never negative",
				id, a.balance, a.applied, a.minBalance, bal, count[id])
		}
	}
}

// TestLedgerBothModes runs the example as `go run ./examples/ledger` does
// (embedded broker, both modes) and checks what it prints: ordered by
// account, every balance matches and none went negative; unordered, the
// balances match too (idempotent by offset), but some went negative.
func TestLedgerBothModes(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, []string{"--transfers", "4000"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	ordered, unordered, ok := strings.Cut(out, "unordered:")
	if !ok {
		t.Fatalf("no unordered section:\n%s", out)
	}
	for _, want := range []string{"balances equal to the sum of their transfers: 50 of 50", "each transfer applied once: 50 of 50"} {
		if !strings.Contains(ordered, want) || !strings.Contains(unordered, want) {
			t.Errorf("want %q in both sections:\n%s", want, out)
		}
	}
	if !strings.Contains(ordered, "accounts that went negative on the way: 0 (lowest balance ever 0.00)") {
		t.Errorf("ordered: want no account negative:\n%s", out)
	}
	neg := regexp.MustCompile(`went negative on the way: (\d+)`).FindStringSubmatch(unordered)
	if neg == nil || neg[1] == "0" {
		t.Errorf("unordered: want some accounts negative:\n%s", out)
	}
}

// TestLedgerDBBeforeProduce: --db is created if missing, and the
// databases are opened before anything is produced: a missing --db
// failed with "unable to open database file" only after the transfers
// were produced, so a rerun with --produce doubled the topic.
func TestLedgerDBBeforeProduce(t *testing.T) {
	t.Parallel()
	const n = 300
	tests := []struct {
		name     string
		db       func(t *testing.T, dir string) string // --db under the test's directory
		wantErr  string                                // "": the run succeeds
		produced int64                                 // records in the topic after the run
	}{
		{"missing", func(_ *testing.T, dir string) string { return filepath.Join(dir, "new", "db") }, "", n},
		{"unopenable", func(t *testing.T, dir string) string {
			// ordered.db is a directory: SQLite cannot open it.
			if err := os.MkdirAll(filepath.Join(dir, "ordered.db"), 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "ordered.db", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := broker.Start(broker.Config{Topics: []string{"transfers"}, Partitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			db := tt.db(t, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err = run(ctx, []string{"--brokers", b.Addrs()[0], "--produce", "--mode", "ordered", "--db", db,
				"--transfers", strconv.Itoa(n), "--accounts", "10", "--commit-interval", "100ms"}, &stdout, &stderr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("run with --db %s: %v\nstdout:\n%s\nstderr:\n%s", db, err, stdout.String(), stderr.String())
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("run with --db %s: got %v, want an error naming %q", db, err, tt.wantErr)
			}
			var produced int64
			for _, hw := range b.HighWatermarks("transfers") {
				produced += hw
			}
			if produced != tt.produced {
				t.Errorf("the topic holds %d records after the run, want %d", produced, tt.produced)
			}
			if tt.wantErr == "" {
				if got := appliedSoFar(t, filepath.Join(db, "ordered.db")); got != n {
					t.Errorf("ordered.db in --db %s: %d transfers applied, want %d", db, got, n)
				}
			}
		})
	}
}

// TestLedgerTopicMissing: on a cluster without the topic the ledger says
// that the topic must exist, before it produces or consumes anything.
func TestLedgerTopicMissing(t *testing.T) {
	t.Parallel()
	b, err := broker.Start(broker.Config{Topics: []string{"other"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"--brokers", b.Addrs()[0], "--produce", "--db", t.TempDir(), "--transfers", "10"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `topic "transfers" does not exist on `+b.Addrs()[0]+": create it first") {
		t.Fatalf("run on a cluster without the topic: got %v, want an error saying that it must be created first", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("printed before refusing:\n%s", stdout.String())
	}
}

// TestLedgerTopicEmpty: without --produce, a topic that holds no records
// (never written, or every record deleted) is refused before anything is
// consumed, with an error that says so and names --produce.
func TestLedgerTopicEmpty(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		written int // transfers produced, then deleted
	}{
		{"never written", 0},
		{"every record deleted", 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := broker.Start(broker.Config{Topics: []string{"transfers"}, Partitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tt.written > 0 {
				if err := produce(ctx, b.Addrs(), "transfers", plan(tt.written, 5, 1)); err != nil {
					t.Fatal(err)
				}
				deleteAll(t, b, "transfers")
			}
			var stdout, stderr bytes.Buffer
			err = run(ctx, []string{"--brokers", b.Addrs()[0], "--db", t.TempDir(), "--transfers", "10"}, &stdout, &stderr)
			want := `topic "transfers" on ` + b.Addrs()[0] + ` holds no records: give --produce to write the 10 transfers to it first`
			if err == nil || err.Error() != want {
				t.Fatalf("run without --produce on an empty topic: got %v, want %q", err, want)
			}
			if stdout.Len() > 0 {
				t.Errorf("printed before refusing:\n%s", stdout.String())
			}
		})
	}
}

// deleteAll deletes every record of topic with DeleteRecords.
func deleteAll(t *testing.T, b *broker.Broker, topic string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(b.Addrs(), group.DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	hw := b.HighWatermarks(topic)
	if err := admin.DeleteRecords(topic, hw); err != nil {
		t.Fatal(err)
	}
	if got := b.LogStartOffsets(topic); !maps.Equal(got, hw) {
		t.Fatalf("%s's log start offsets after DeleteRecords: got %v, want %v", topic, got, hw)
	}
}
