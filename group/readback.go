package group

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"

	"github.com/orderly-go/orderly/internal/endoffsets"
	"github.com/orderly-go/orderly/internal/lograte"
)

// Read-back. sarama does not say what the coordinator acknowledged, so
// every Status.ReadBack the read-back loop asks it (OffsetFetch, one
// request for every claimed partition) and publishes the answer as
// PartitionStats.Committed: what lag monitors (kafka_exporter, Burrow,
// KEDA) see. It also lists the partitions' high watermarks (ListOffsets,
// one request per leader): a partition whose fetching is paused gets no
// fetch responses, and its lag would otherwise stand still. The committed
// offsets read are remembered, under DataPath when it is set, so that a
// claim that starts below the offset last seen committed (the group's
// offsets reset while it was empty) shows REWIND.

// historyFile is the read-back's record under DataPath.
const historyFile = "committed-offsets.json"

type topicPartition struct {
	topic string
	part  int32
}

// history is the committed offset last read back per partition. Its
// mutex is taken by the read-back loop and by claim starts.
type history struct {
	mu      sync.Mutex
	group   string
	path    string // "" without DataPath
	offsets map[topicPartition]int64
	dirty   bool
}

// historyRecord is historyFile's content.
type historyRecord struct {
	Group   string                      `json:"group"`
	Offsets map[string]map[string]int64 `json:"offsets"` // topic, partition
}

// loadHistory reads the record under dataPath, if any. A record of
// another group is ignored (and replaced at the next save). On error it
// returns an empty history that saves to the same path, with the error:
// the record only serves REWIND across restarts, so it must not stop Run.
func loadHistory(group, dataPath string) (*history, error) {
	h := &history{group: group, offsets: map[topicPartition]int64{}}
	if dataPath == "" {
		return h, nil
	}
	h.path = filepath.Join(dataPath, historyFile)
	b, err := os.ReadFile(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return h.fresh(), fmt.Errorf("group: committed offsets seen: %w", err)
	}
	var rec historyRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return h.fresh(), fmt.Errorf("group: committed offsets seen: %s does not decode (delete it to start afresh): %w", h.path, err)
	}
	if rec.Group != group {
		return h, nil
	}
	for topic, parts := range rec.Offsets {
		for p, off := range parts {
			n, err := strconv.ParseInt(p, 10, 32)
			if err != nil {
				return h.fresh(), fmt.Errorf("group: committed offsets seen: %s: topic %q has partition %q: %w", h.path, topic, p, err)
			}
			h.offsets[topicPartition{topic, int32(n)}] = off
		}
	}
	return h, nil
}

// fresh empties h (after a record that could not be read).
func (h *history) fresh() *history {
	h.offsets = map[topicPartition]int64{}
	h.dirty = true // the next save replaces what could not be read
	return h
}

// seen records a committed offset read back (or a claim's initial
// offset), and returns the one seen before, if any.
func (h *history) seen(tp topicPartition, off int64) (prev int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, ok = h.offsets[tp]
	if !ok || prev != off {
		h.offsets[tp] = off
		h.dirty = true
	}
	return prev, ok
}

// save writes the record if it changed: to a temporary file, synced,
// then renamed over the old one, so that a crash leaves one or the other.
func (h *history) save() error {
	h.mu.Lock()
	if h.path == "" || !h.dirty {
		h.mu.Unlock()
		return nil
	}
	rec := historyRecord{Group: h.group, Offsets: map[string]map[string]int64{}}
	for tp, off := range h.offsets {
		if rec.Offsets[tp.topic] == nil {
			rec.Offsets[tp.topic] = map[string]int64{}
		}
		rec.Offsets[tp.topic][strconv.Itoa(int(tp.part))] = off
	}
	h.dirty = false
	h.mu.Unlock()
	if err := writeFileSynced(h.path, rec); err != nil {
		h.mu.Lock()
		h.dirty = true // the next save tries again
		h.mu.Unlock()
		return fmt.Errorf("group: save committed offsets seen to %s: %w", h.path, err)
	}
	return nil
}

// writeFileSynced writes v as JSON to path through a synced temporary file
// renamed over it, so a crash leaves the old file or the new one.
func writeFileSynced(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp) // nothing to keep of a write that failed
	}
	return err
}

// readBackLoop reads back the committed offsets every readBackEvery until
// stop is closed.
func (g *Group[T]) readBackLoop(stop <-chan struct{}) {
	if g.cfg.Status.ReadBack < 0 {
		return
	}
	t := time.NewTicker(g.cfg.Status.ReadBack)
	defer t.Stop()
	var errLog lograte.Limit
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		}
		if err := g.readBack(); err != nil {
			errLog.Warn(g.log, "reading back committed offsets failed", zap.Error(err))
		}
	}
}

// readBack asks the coordinator for the committed offsets of every
// claimed partition and publishes them.
func (g *Group[T]) readBack() error {
	g.claimsMu.Lock()
	req := map[string][]int32{}
	claims := make(map[topicPartition]*claimState, len(g.claims))
	for c := range g.claims {
		req[c.topic] = append(req[c.topic], c.part)
		claims[topicPartition{c.topic, c.part}] = c
	}
	g.claimsMu.Unlock()
	if len(claims) == 0 || g.client == nil {
		return nil
	}
	hws, hwErr := endoffsets.List(g.client, g.cfg.Sarama.Version, req, sarama.ReadUncommitted)
	for tp, hw := range hws {
		claims[topicPartition{tp.Topic, tp.Part}].listedHW.Store(hw) // this loop is its only writer
	}
	blocks, _, err := g.fetchCommittedMany(req) // a partition without an answer keeps its last read
	if err != nil {
		return errors.Join(err, hwErr)
	}
	now := time.Now()
	for tp, c := range claims {
		block, ok := blocks[tp]
		if !ok {
			continue
		}
		off := block.Offset
		c.view.mu.Lock()
		c.view.committed, c.view.readAt = off, now
		c.view.mu.Unlock()
		if off >= 0 {
			g.history.seen(tp, off)
		}
	}
	return errors.Join(hwErr, g.history.save())
}

// fetchCommittedMany asks the group coordinator for the committed offset
// and metadata of many partitions in one request: the answers of those
// that answered without error (offset -1 when the group has none), and
// the errors of those that did not. err is the request's own error, or,
// when no partition answered, the partitions' errors joined.
func (g *Group[T]) fetchCommittedMany(parts map[string][]int32) (map[topicPartition]*sarama.OffsetFetchResponseBlock, map[topicPartition]error, error) {
	b, err := g.client.Coordinator(g.cfg.GroupID)
	if err != nil {
		return nil, nil, fmt.Errorf("find coordinator of group %q: %w", g.cfg.GroupID, err)
	}
	resp, err := b.FetchOffset(sarama.NewOffsetFetchRequest(g.cfg.Sarama.Version, g.cfg.GroupID, parts))
	if err == nil && resp.Err != sarama.ErrNoError {
		err = resp.Err
	}
	if err != nil {
		if errors.Is(err, sarama.ErrNotCoordinatorForConsumer) {
			_ = g.client.RefreshCoordinator(g.cfg.GroupID)
		}
		return nil, nil, fmt.Errorf("fetch committed offsets of group %q: %w", g.cfg.GroupID, err)
	}
	out := make(map[topicPartition]*sarama.OffsetFetchResponseBlock)
	var failed map[topicPartition]error
	fail := func(tp topicPartition, err error) {
		if failed == nil {
			failed = make(map[topicPartition]error)
		}
		failed[tp] = fmt.Errorf("fetch committed offset of group %q, %s/%d: %w", g.cfg.GroupID, tp.topic, tp.part, err)
	}
	for topic, ps := range parts {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			switch block := resp.GetBlock(topic, p); {
			case block == nil:
				fail(tp, errNoAnswer)
			case block.Err != sarama.ErrNoError:
				fail(tp, block.Err)
			default:
				out[tp] = block
			}
		}
	}
	if len(out) == 0 && len(failed) > 0 {
		errs := make([]error, 0, len(failed))
		for _, err := range failed {
			errs = append(errs, err)
		}
		return nil, failed, errors.Join(errs...)
	}
	return out, failed, nil
}

// errNoAnswer: an OffsetFetch response without a block for a partition
// asked about.
var errNoAnswer = errors.New("no answer for the partition")
