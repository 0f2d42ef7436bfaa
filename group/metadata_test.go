package group

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMetadataTooLargeFallsBack: a broker whose offset.metadata.max.bytes
// is below what Orderly sends answers OFFSET_METADATA_TOO_LARGE; the
// partition's commits then go out without metadata (sarama alone would
// resend the same rejected metadata every interval), and it is counted
// and logged once.
func TestMetadataTooLargeFallsBack(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const n, keys = 5000, 50
	r := newRig(t, "small-meta", 1, n, keys)
	var mu sync.Mutex
	var after []string // metadata of the commits that follow the first rejected one
	rejected := false
	r.b.ObserveCommits(func(req *kmsg.OffsetCommitRequest) {
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				md := ""
				if p.Metadata != nil {
					md = *p.Metadata
				}
				if rejected {
					after = append(after, md)
				}
				rejected = rejected || len(md) > 8
			}
		}
	})
	r.b.RejectCommitMetadata(8) // after the observer: control functions run in order, and this one answers
	logger, logs := observed()
	w := r.work(0, 0)
	do, stuck, release := stuckDo(func(m *Message) bool { return m.Offset == 0 }, w.Do)
	cfg := r.config("small-meta")
	cfg.Logger = logger
	cfg.Size = 1
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	defer release()
	<-stuck
	waitFor(t, time.Minute, "a commit without metadata after the rejection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, md := range after {
			if md == "" {
				return true
			}
		}
		return false
	})
	release()
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.check(false)
	st := g.Stats()
	if st.MetadataRejected != 1 || st.ErrorsBy.Metadata == 0 {
		t.Fatalf("Stats: got MetadataRejected %d, ErrorsBy.Metadata %d; want 1 and > 0", st.MetadataRejected, st.ErrorsBy.Metadata)
	}
	if got := logs.FilterMessageSnippet("refused the commit metadata").Len(); got != 1 {
		t.Fatalf("rejection logged %d times, want once", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, md := range after {
		if md != "" && i > 2 {
			t.Fatalf("commit %d after the rejection still carries metadata %q", i, md)
		}
	}
}
