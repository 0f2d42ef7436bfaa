package deadletter

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash test runs this test binary again as a child (TestCrashChild)
// that appends from several goroutines and prints the keys of every
// Append that returned, one line per Append in a single write, so a
// printed line means the Append returned. The parent SIGKILLs it.
const crashDirEnv = "DEADLETTER_CRASH_DIR"

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestCrash")
	}
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	round := os.Getenv(crashDirEnv + "_ROUND")
	var out sync.Mutex
	for w := range 4 {
		go func() {
			for i := 0; ; i++ {
				keys := []string{fmt.Sprintf("%s/%d/%d/a", round, w, i)}
				if i%3 == 0 {
					keys = append(keys, fmt.Sprintf("%s/%d/%d/b", round, w, i))
				}
				var recs []Record
				for _, k := range keys {
					recs = append(recs, Record{Key: []byte(k), Value: make([]byte, 100+i%700)})
				}
				if err := s.Append(recs...); err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(2)
				}
				out.Lock()
				os.Stdout.WriteString(strings.Join(keys, " ") + "\n")
				out.Unlock()
			}
		}()
	}
	select {} // until killed
}

// TestCrash: a process SIGKILLed while appending loses no record whose
// Append returned; the next Open cuts off whatever it was writing and
// finds no damage. Three rounds on one store, so later rounds append
// behind a cut.
func TestCrash(t *testing.T) {
	dir := t.TempDir()
	acked := map[string]bool{}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s_ROUND=%d", crashDirEnv, round))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		lines := 0
		deadline := time.Now().Add(10 * time.Second)
		// Kill it at a different moment each round: after 100, 233, 366
		// acknowledged Appends.
		for lines < 100+133*round && sc.Scan() {
			for k := range strings.FieldsSeq(sc.Text()) {
				acked[k] = true
			}
			lines++
			if time.Now().After(deadline) {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() { // lines printed before the kill
			for k := range strings.FieldsSeq(sc.Text()) {
				acked[k] = true
			}
		}
		cmd.Wait()
		if lines == 0 {
			t.Fatalf("round %d: the child acknowledged nothing:\n%s", round, stderr.String())
		}

		var damage []Damage
		s, err := Open(dir, Options{OnDamage: func(d Damage) { damage = append(damage, d) }})
		if err != nil {
			t.Fatalf("round %d: Open after SIGKILL: %v", round, err)
		}
		found := map[string]bool{}
		err = s.Scan(func(_ int64, r Record) error {
			if found[string(r.Key)] {
				return fmt.Errorf("record %s twice", r.Key)
			}
			found[string(r.Key)] = true
			return nil
		})
		st := s.Stats()
		s.Close()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		missing := 0
		for k := range acked {
			if !found[k] {
				missing++
			}
		}
		if missing > 0 || len(damage) > 0 {
			t.Fatalf("round %d: %d of %d acknowledged records missing, damage %v", round, missing, len(acked), damage)
		}
		t.Logf("round %d: %d acknowledged, %d in the store, %d torn bytes cut", round, len(acked), len(found), st.TornBytes)
	}
}
