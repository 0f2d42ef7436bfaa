package group

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/lograte"
)

// deadLetters writes dead letters, one goroutine, in batches: to
// Config.DeadLetterTopic through a sarama SyncProducer (acks from all
// in-sync replicas), or to the local store under DataPath (fsynced). A
// job's item stays where it is until its record is written: held first
// in its lane, or tracked unfinished (a message New could not decode), so
// its offset is not committed before its dead letter exists. A write that
// fails is retried with the Retry backoff, counted and logged, never
// dropped; a crash before it succeeds redelivers the message (at least
// once, also as a dead letter).
type deadLetters[T any] struct {
	g    *Group[T]
	sink deadSink // nil: no destination configured

	mu    sync.Mutex
	queue []deadJob[T]
	kick  chan struct{}

	byReason    [4]atomic.Int64 // max_attempts, rejected, timeout, poison
	skipped     atomic.Int64    // dead letters with no destination: skipped
	writeErrors atomic.Int64
	pending     atomic.Int64
	errLog      lograte.Limit
	writtenLog  lograte.Limit // "dead-lettered": one line a second, however many
}

// deadJob is one message to dead-letter; done runs once its record is
// written (it lets the item's lane go on, or finishes the item), and
// reports whether the item's partition took it back: not once its owner
// let go of it (a drain past DrainTimeout), which then did not count it.
type deadJob[T any] struct {
	it       *dispatch.Item[Message, T]
	reason   string
	attempts int
	err      error
	done     func() (taken bool)
}

// deadSink is where dead letters go.
type deadSink interface {
	// write writes recs and, on error, returns those still to write (a
	// producer can refuse some records of a batch and take the rest).
	write(recs []deadletter.Record) (unwritten []deadletter.Record, err error)
	close() error
	name() string // for Stats and logs: the topic, or the store's path
}

func newDeadLetters[T any](g *Group[T]) *deadLetters[T] {
	return &deadLetters[T]{g: g, kick: make(chan struct{}, 1)}
}

// open opens the destination: a producer on client for a dead-letter
// topic, or the local store. With neither configured it does nothing.
func (d *deadLetters[T]) open(client sarama.Client) error {
	switch {
	case d.g.cfg.DeadLetterTopic != "":
		if client == nil {
			return fmt.Errorf("group: dead-letter topic %q needs a Kafka client", d.g.cfg.DeadLetterTopic)
		}
		p, err := sarama.NewSyncProducerFromClient(client)
		if err != nil {
			return fmt.Errorf("group: producer for the dead-letter topic %q: %w", d.g.cfg.DeadLetterTopic, err)
		}
		d.sink = &topicSink{topic: d.g.cfg.DeadLetterTopic, p: p}
	case d.g.cfg.DataPath != "":
		dir := filepath.Join(d.g.cfg.DataPath, deadletter.DirName)
		log := d.g.log.With(zap.String("destination", "local:"+dir), zap.String("file", filepath.Join(dir, deadletter.DataFile)))
		st, err := deadletter.Open(dir, deadletter.Options{OnDamage: func(dm deadletter.Damage) {
			// Open reads the whole file: the records a damaged
			// stretch held are not listed until it is mended.
			log.Error("local dead-letter store damaged; the stretch is kept, its records unreadable",
				zap.Int64("file_offset", dm.Offset), zap.Int64("bytes", dm.Length), zap.String("damage", dm.Reason))
		}})
		if err != nil {
			return fmt.Errorf("group: local dead-letter store: %w", err)
		}
		if n := st.Stats().Mended; n > 0 {
			log.Warn("mended the damaged length field of dead letters in the local store (their checksums gave the length)",
				zap.Int64("records", n))
		}
		if torn := st.Stats().TornBytes; torn > 0 {
			log.Warn("cut off the incomplete last dead letter a crash left in the local store (its message was not committed past)",
				zap.Int64("bytes", torn))
		}
		d.sink = &storeSink{st: st, dir: dir}
	}
	return nil
}

// deadLetterDestination names where dead letters go, from the config (as
// deadLetters.open picks it): "topic:NAME", "local:DIR" or "".
func (g *Group[T]) deadLetterDestination() string {
	switch {
	case g.cfg.DeadLetterTopic != "":
		return "topic:" + g.cfg.DeadLetterTopic
	case g.cfg.DataPath != "":
		return "local:" + filepath.Join(g.cfg.DataPath, deadletter.DirName)
	}
	return ""
}

// enabled reports whether dead letters have a destination.
func (d *deadLetters[T]) enabled() bool { return d.sink != nil }

// add queues it to be dead-lettered, with the given reason and the error
// that made it one; attempts is how many times Do was called with it.
// Without a destination the message is skipped: logged and counted.
// done (nil: it is held) finishes it once that is done (see deadJob).
func (d *deadLetters[T]) add(it *dispatch.Item[Message, T], done func() bool, reason string, attempts int, err error) {
	if done == nil {
		// Held: a revoke from here on leaves it outstanding, so the
		// drain waits for its dead letter and the final commit passes it.
		d.g.sched.Finishing(it)
		done = func() bool { return d.g.sched.FinishHeld(it) }
	}
	it.Fate = fateDeadLettered
	if d.sink == nil {
		it.Fate = fateSkipped
		d.skipped.Add(1)
		d.errLog.Warn(d.g.log, "no dead-letter destination (DeadLetterTopic, DataPath): message skipped",
			zap.String("topic", it.Msg.Topic), zap.Int32("partition", it.Msg.Partition), zap.Int64("offset", it.Msg.Offset),
			zap.String("reason", reason), zap.Int("attempt", attempts), zap.Error(err))
		d.g.finishWritten(it, done)
		return
	}
	d.pending.Add(1)
	d.mu.Lock()
	d.queue = append(d.queue, deadJob[T]{it: it, reason: reason, attempts: attempts, err: err, done: done})
	d.mu.Unlock()
	notify(d.kick)
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// start runs the writer until ctx ends.
func (d *deadLetters[T]) start(ctx context.Context, wg *sync.WaitGroup) {
	if d.sink == nil {
		return
	}
	wg.Go(func() { d.run(ctx) })
}

func (d *deadLetters[T]) run(ctx context.Context) {
	var jobs []deadJob[T]
	var recs []deadletter.Record
	for {
		select {
		case <-d.kick:
		case <-ctx.Done():
			return
		}
		d.mu.Lock()
		jobs, d.queue = d.queue, jobs[:0]
		d.mu.Unlock()
		recs = recs[:0]
		for _, j := range jobs {
			recs = append(recs, d.record(j))
		}
		todo := recs
		if len(jobs) > 0 && !d.g.retryWrites(ctx, func() (err error) {
			todo, err = d.sink.write(todo)
			return err
		}, func(err error, wait time.Duration) {
			d.writeErrors.Add(1)
			d.errLog.Warn(d.g.log, "writing dead letters failed; retrying", zap.String("destination", d.sink.name()),
				zap.Int("records", len(todo)), zap.Duration("backoff", wait), zap.Error(err))
		}) {
			return // the items stay unfinished: nothing is committed past them
		}
		for _, j := range jobs {
			d.byReason[reasonIndex(j.reason)].Add(1)
			d.pending.Add(-1)
			d.writtenLog.Warn(d.g.log, "dead-lettered", zap.String("topic", j.it.Msg.Topic), zap.Int32("partition", j.it.Msg.Partition),
				zap.Int64("offset", j.it.Msg.Offset), zap.String("reason", j.reason), zap.Int("attempt", j.attempts),
				zap.String("destination", d.sink.name()), zap.Error(j.err))
			d.g.finishWritten(j.it, j.done)
		}
		clear(jobs)
		clear(recs)
	}
}

// record builds the dead letter of a job: the message's key, value,
// headers (less earlier __orderly.errors.* ones) and timestamp, with the
// __orderly.errors.* headers saying where it came from and why.
func (d *deadLetters[T]) record(j deadJob[T]) deadletter.Record {
	m := &j.it.Msg
	hs := make([]deadletter.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = deadletter.Header{Key: h.Key, Value: h.Value}
	}
	first := j.it.FirstFailure()
	if first.IsZero() {
		first = time.Now()
	}
	msg := ""
	if j.err != nil {
		msg = j.err.Error()
	}
	return deadletter.Record{
		Key: m.Key, Value: m.Value, Timestamp: m.Timestamp,
		Headers: deadletter.Headers(hs, deadletter.Info{
			Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Timestamp: time.Now(),
			Group: d.g.cfg.GroupID, Attempts: j.attempts, Reason: j.reason, Message: msg, FirstFailure: first,
		}),
	}
}

func reasonIndex(reason string) int {
	switch reason {
	case reasonMaxAttempts:
		return 0
	case reasonRejected:
		return 1
	case reasonTimeout:
		return 2
	}
	return 3
}

func (d *deadLetters[T]) close() error {
	if d.sink == nil {
		return nil
	}
	return d.sink.close()
}

// topicSink produces dead letters to a Kafka topic.
type topicSink struct {
	topic string
	p     sarama.SyncProducer
}

func (s *topicSink) write(recs []deadletter.Record) ([]deadletter.Record, error) {
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		m := &sarama.ProducerMessage{Topic: s.topic, Timestamp: r.Timestamp, Metadata: i}
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		if r.Value != nil {
			m.Value = sarama.ByteEncoder(r.Value)
		}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		msgs[i] = m
	}
	if err := s.p.SendMessages(msgs); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			// The others are written: only the refused ones go again.
			failed := make([]deadletter.Record, 0, len(perrs))
			for _, pe := range perrs {
				i, ok := pe.Msg.Metadata.(int)
				if !ok {
					return recs, fmt.Errorf("produce %d of %d dead letters to %s: %w", len(perrs), len(msgs), s.topic, pe.Err)
				}
				failed = append(failed, recs[i])
			}
			return failed, fmt.Errorf("produce %d of %d dead letters to %s: %w", len(perrs), len(msgs), s.topic, perrs[0].Err)
		}
		return recs, fmt.Errorf("produce dead letters to %s: %w", s.topic, err)
	}
	return nil, nil
}

func (s *topicSink) close() error { return s.p.Close() }
func (s *topicSink) name() string { return "topic:" + s.topic }

// storeSink appends dead letters to the local store.
type storeSink struct {
	st  *deadletter.Store
	dir string
}

func (s *storeSink) write(recs []deadletter.Record) ([]deadletter.Record, error) {
	if err := s.st.Append(recs...); err != nil {
		return recs, err
	}
	return nil, nil
}
func (s *storeSink) close() error { return s.st.Close() }
func (s *storeSink) name() string { return "local:" + s.dir }
