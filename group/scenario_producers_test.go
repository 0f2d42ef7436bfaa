package group

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
)

// Reliability scenario 12: records written by real producers, sarama's and
// franz-go's kgo, the way services write them: idempotent, transactional
// with aborts, every compression codec, headers, null keys, null values
// (tombstones), records near max.message.bytes, a compacted topic with
// gaps. Every record carries its ledger (key, seq) in a header as well as,
// when it has a value, at the head of the value, and a payload derived
// from (key, seq): Do checks each record against what was produced.

// rec12 is one record to produce: ledger key and seq, its Kafka key (nil: a
// null key, pinned to part), whether its value is null, its payload size.
type rec12 struct {
	key, seq  uint32
	kafkaKey  []byte
	part      int32 // for null keys
	tombstone bool
	size      int
}

const (
	hdrProducer = "orderly-test-producer12"
	hdrLedger   = "orderly-test-ledger"
	hdrEmpty    = "orderly-test-empty"
)

// payload12 is the payload of (key, seq): size bytes that compress well
// but differ from record to record.
func payload12(key, seq uint32, size int) []byte {
	b := make([]byte, 0, size+32)
	for len(b) < size {
		b = fmt.Appendf(b, "key %d seq %d; ", key, seq)
	}
	return b[:size]
}

// value is the record's value: nil for a tombstone.
func (r rec12) value() []byte {
	if r.tombstone {
		return nil
	}
	return ledger.Encode(nil, r.key, r.seq, time.Time{}, payload12(r.key, r.seq, r.size))
}

// fnv32a is sarama's key hash (NewHashPartitioner).
func fnv32a(b []byte) uint32 {
	h := fnv.New32a()
	_, _ = h.Write(b)
	return h.Sum32()
}

// saramaCompat places a keyed record where sarama's default partitioner
// does (kgo's sarama-compatible hasher over sarama's FNV-1a), and a
// null-key record on the partition it names.
func saramaCompat() kgo.Partitioner {
	hash := kgo.SaramaCompatHasher(fnv32a)
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			if r.Key == nil {
				return int(r.Partition)
			}
			return hash(r.Key, n)
		}
	})
}

// saramaPinned is sarama's hash partitioner for keyed records; a null-key
// record goes to the partition it names.
type saramaPinned struct{ hash sarama.Partitioner }

func (p saramaPinned) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if m.Key == nil {
		return m.Partition, nil
	}
	return p.hash.Partition(m, n)
}

func (saramaPinned) RequiresConsistency() bool { return true }

// producer12 writes records to a topic and returns once all are
// acknowledged.
type producer12 struct {
	name    string
	produce func(t *testing.T, topic string, recs []rec12)
}

func headers12(name string, r rec12) [][2][]byte {
	return [][2][]byte{
		{[]byte(hdrProducer), []byte(name)},
		{[]byte(hdrLedger), ledger.Encode(nil, r.key, r.seq, time.Time{}, nil)},
		{[]byte(hdrEmpty), nil},
	}
}

// kgoProducer is a kgo client (idempotent, as kgo is by default) with
// codec and opts, partitioning like sarama.
func kgoProducer(t *testing.T, addrs []string, name string, codec kgo.CompressionCodec, opts ...kgo.Opt) producer12 {
	t.Helper()
	cl := newKgo(t, addrs, append([]kgo.Opt{kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(saramaCompat())}, opts...)...)
	return producer12{name: name, produce: func(t *testing.T, topic string, recs []rec12) {
		t.Helper()
		produceKgo(t, cl, kgoRecords(name, topic, recs)...)
	}}
}

func kgoRecords(name, topic string, recs []rec12) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: topic, Key: r.kafkaKey, Value: r.value(), Partition: r.part}
		for _, h := range headers12(name, r) {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: string(h[0]), Value: h[1]})
		}
		out[i] = kr
	}
	return out
}

// saramaProducer is an idempotent sarama SyncProducer with codec.
func saramaProducer(t *testing.T, addrs []string, name string, codec sarama.CompressionCodec, maxBytes int) producer12 {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0
	sc.ClientID = "orderly-test-" + name
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Return.Successes = true
	sc.Producer.Compression = codec
	sc.Producer.Flush.Messages = 500
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	if maxBytes > 0 {
		sc.Producer.MaxMessageBytes = maxBytes
	}
	sc.Producer.Partitioner = func(topic string) sarama.Partitioner { return saramaPinned{sarama.NewHashPartitioner(topic)} }
	p, err := sarama.NewSyncProducer(addrs, sc)
	if err != nil {
		t.Fatalf("sarama producer %s: %v", name, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return producer12{name: name, produce: func(t *testing.T, topic string, recs []rec12) {
		t.Helper()
		msgs := make([]*sarama.ProducerMessage, len(recs))
		for i, r := range recs {
			m := &sarama.ProducerMessage{Topic: topic, Partition: r.part}
			if r.kafkaKey != nil {
				m.Key = sarama.ByteEncoder(r.kafkaKey)
			}
			if v := r.value(); v != nil {
				m.Value = sarama.ByteEncoder(v)
			}
			for _, h := range headers12(name, r) {
				m.Headers = append(m.Headers, sarama.RecordHeader{Key: h[0], Value: h[1]})
			}
			msgs[i] = m
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatalf("sarama producer %s: %v", name, err)
		}
	}}
}

// plan12 hands out ledger seqs per key and the counts the oracle expects.
type plan12 struct {
	counts []uint32
}

func (p *plan12) next(key uint32, kafkaKey []byte, part int32, tombstone bool, size int) rec12 {
	for int(key) >= len(p.counts) {
		p.counts = append(p.counts, 0)
	}
	r := rec12{key: key, seq: p.counts[key], kafkaKey: kafkaKey, part: part, tombstone: tombstone, size: size}
	p.counts[key]++
	return r
}

// checker12 is the Do of scenario 12: it checks each record against what was
// produced (ledger header, payload, headers, null key, null value), that
// every Kafka key lives on one partition, that no aborted record arrives,
// and reports the rest to the oracle.
type checker12 struct {
	tag string
	o   *oracle
	g   atomic.Pointer[Group[*Message]]
	n   atomic.Int64

	mu       sync.Mutex
	problems []string
	keyPart  map[string]int32
	aborted  int
	nullKeys int
	nulls    int
	codecs   map[string]int // records by producer
}

func newChecker12(tag string, o *oracle) *checker12 {
	return &checker12{tag: tag, o: o, keyPart: map[string]int32{}, codecs: map[string]int{}}
}

func (c *checker12) problem(m *Message, format string, args ...any) {
	if len(c.problems) < 20 {
		c.problems = append(c.problems, fmt.Sprintf("%s/%d@%d: ", m.Topic, m.Partition, m.Offset)+fmt.Sprintf(format, args...))
	}
}

func (c *checker12) Do(_ context.Context, batch []*Message) error {
	now := time.Now()
	g := c.g.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range batch {
		if string(m.Value) == "aborted" {
			c.aborted++
			continue
		}
		if len(m.Headers) != 3 || string(m.Headers[0].Key) != hdrProducer || string(m.Headers[1].Key) != hdrLedger ||
			string(m.Headers[2].Key) != hdrEmpty || len(m.Headers[2].Value) != 0 {
			c.problem(m, "headers %q, want %s, %s and %s (empty)", m.Headers, hdrProducer, hdrLedger, hdrEmpty)
			continue
		}
		c.codecs[string(m.Headers[0].Value)]++
		key, seq, _, _, err := ledger.Decode(m.Headers[1].Value)
		if err != nil {
			c.problem(m, "ledger header: %v", err)
			continue
		}
		if m.Value == nil {
			c.nulls++
		} else {
			vk, vs, _, payload, err := ledger.Decode(m.Value)
			switch {
			case err != nil:
				c.problem(m, "value: %v", err)
				continue
			case vk != key || vs != seq:
				c.problem(m, "value says key %d seq %d, header says key %d seq %d", vk, vs, key, seq)
				continue
			case !bytes.Equal(payload, payload12(key, seq, len(payload))):
				c.problem(m, "payload of %d bytes differs from what was produced for key %d seq %d", len(payload), key, seq)
				continue
			}
		}
		if m.Key == nil {
			c.nullKeys++
		} else if p, ok := c.keyPart[string(m.Key)]; ok && p != m.Partition {
			c.problem(m, "key %q on partition %d and %d: the producers' partitioners disagree", m.Key, p, m.Partition)
		} else {
			c.keyPart[string(m.Key)] = m.Partition
		}
		var gen int32
		if g != nil {
			if cs := claimOf(g, m.Topic, m.Partition); cs != nil {
				gen = cs.sess.GenerationID()
			}
		}
		c.o.mu.Lock()
		c.o.doneLocked(c.tag, gen, m.Partition, m.Offset, m.Attempt, key, seq, now)
		c.o.mu.Unlock()
	}
	c.n.Add(int64(len(batch)))
	return nil
}

// start runs a Group with the checker as its Do.
func (c *checker12) start(t *testing.T, cfg Config) (stop func() error) {
	t.Helper()
	g := newGroup(t, cfg, c.Do)
	c.g.Store(g)
	return run(t, g)
}

// report fails the test on what the checker found.
func (c *checker12) report(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		t.Error(p)
	}
	if c.aborted != 0 {
		t.Errorf("aborted records handed to Do: got %d, want 0", c.aborted)
	}
}

// scenario12 is one part of scenario 12: a broker with topic, an oracle
// over the plan, and a checker consuming it as group.
type scenario12 struct {
	b   *broker.Broker
	o   *oracle
	c   *checker12
	cfg Config
}

func startScenario12(t *testing.T, name, topic string, partitions int32, configs map[string]string, counts []uint32) *scenario12 {
	t.Helper()
	b, err := broker.Start(broker.Config{})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(b.Close)
	if err := b.Cluster().CreateTopic(topic, partitions, configs); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	o := newOracle(t, name, topic, counts)
	b.ObserveCommits(o.observe)
	cfg := fastConfig(t, b.Addrs(), topic, topic)
	cfg.Size, cfg.Num, cfg.Ticker = 16, 4, 5*time.Millisecond
	return &scenario12{b: b, o: o, c: newChecker12("c", o), cfg: cfg}
}

// waitClaimed waits until the checker's group holds n partitions.
func (s *scenario12) waitClaimed(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, 30*time.Second, "the group to claim every partition", func() bool { return s.c.g.Load().Stats().Partitions == n })
}

// finish waits for everything to be committed and runs the checks.
func (s *scenario12) finish(t *testing.T, stop func() error, w want) verdict {
	t.Helper()
	waitFor(t, time.Minute, "committed offsets to reach the high watermarks", func() bool { return s.b.CaughtUp(s.cfg.GroupID, s.o.topic) })
	v := s.o.check(s.b.Addrs(), s.b.Committed(s.cfg.GroupID, s.o.topic), w)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s.c.report(t)
	return v
}

// TestScenario12Producers: kgo (idempotent) and sarama (idempotent)
// producers, each with every codec (none, gzip, snappy, lz4, zstd), take
// turns writing the same 40 keys of one topic while a group consumes it:
// kgo with its sarama-compatible hasher, so that every key stays on one
// partition whoever writes it, and lane order holds across producers.
// Every record has headers (one of them with an empty value); one in five
// is a tombstone; each partition also gets null-key records, which share
// one lane per partition.
func TestScenario12Producers(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, keys, perKey, size = 4, 40, 6, 300
	var p plan12
	codecs := []struct {
		name  string
		kgo   kgo.CompressionCodec
		saram sarama.CompressionCodec
	}{
		{"none", kgo.NoCompression(), sarama.CompressionNone},
		{"gzip", kgo.GzipCompression(), sarama.CompressionGZIP},
		{"snappy", kgo.SnappyCompression(), sarama.CompressionSnappy},
		{"lz4", kgo.Lz4Compression(), sarama.CompressionLZ4},
		{"zstd", kgo.ZstdCompression(), sarama.CompressionZSTD},
	}
	var phases [][]rec12
	for range 2 * len(codecs) {
		var recs []rec12
		for i := range keys * perKey {
			k := uint32(i % keys)
			recs = append(recs, p.next(k, fmt.Appendf(nil, "k%d", k), 0, i%5 == 4, size))
		}
		for part := range int32(partitions) {
			for range perKey {
				recs = append(recs, p.next(keys+uint32(part), nil, part, false, size))
			}
		}
		phases = append(phases, recs)
	}
	s := startScenario12(t, "12 real producers: kgo and sarama, every codec, headers, null keys and values", "producers", partitions, nil, p.counts)
	addrs := s.b.Addrs()
	var producers []producer12
	for i, c := range codecs {
		kp := kgoProducer(t, addrs, "kgo-"+c.name, c.kgo)
		sp := saramaProducer(t, addrs, "sarama-"+c.name, c.saram, 0)
		if i%2 == 0 {
			producers = append(producers, sp, kp)
		} else {
			producers = append(producers, kp, sp)
		}
	}
	stop := s.c.start(t, s.cfg)
	s.waitClaimed(t, partitions)
	for i, recs := range phases {
		producers[i].produce(t, s.o.topic, recs)
		time.Sleep(50 * time.Millisecond) // a commit interval or so between producers: consumed as they come
	}
	s.finish(t, stop, want{all: true, deleted: 0})
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for _, pr := range producers {
		if s.c.codecs[pr.name] != len(phases[0]) {
			t.Errorf("records from %s handled: got %d, want %d", pr.name, s.c.codecs[pr.name], len(phases[0]))
		}
	}
	// Read back with kgo, a second client: the batches of each producer
	// carry its codec (kgo's RecordAttrs: 0 none, 1 gzip, 2 snappy, 3 lz4,
	// 4 zstd), so the consumer above did decompress every codec, and a
	// producer ID (idempotent).
	got := codecsOf(t, addrs, s.o.topic, len(phases)*len(phases[0]))
	for i, c := range codecs {
		for _, pr := range []string{"kgo-" + c.name, "sarama-" + c.name} {
			if fmt.Sprint(got[pr]) != fmt.Sprint([]uint8{uint8(i)}) {
				t.Errorf("compression of %s's batches on the broker: got %v, want [%d]", pr, got[pr], i)
			}
		}
	}
	wantNulls, wantNullKeys := len(phases)*keys*perKey/5, len(phases)*partitions*perKey
	if s.c.nulls != wantNulls || s.c.nullKeys != wantNullKeys {
		t.Errorf("tombstones handled %d, null keys %d; want %d and %d", s.c.nulls, s.c.nullKeys, wantNulls, wantNullKeys)
	}
	t.Logf("%d producers (kgo and sarama, 5 codecs), %d keys on %d partitions, %d tombstones, %d null-key records", len(producers), len(s.c.keyPart), partitions, s.c.nulls, s.c.nullKeys)
}

// codecsOf reads n records of topic back with kgo and returns the codecs of
// each producer's batches (by the producer header); it fails the test on a
// record written without a producer ID (not idempotently).
func codecsOf(t *testing.T, addrs []string, topic string, n int) map[string][]uint8 {
	t.Helper()
	cl := newKgo(t, addrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]map[uint8]bool{}
	notIdempotent := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s back with kgo: %d of %d records: %v", topic, got, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			var who string
			for _, h := range r.Headers {
				if h.Key == hdrProducer {
					who = string(h.Value)
				}
			}
			if seen[who] == nil {
				seen[who] = map[uint8]bool{}
			}
			seen[who][r.Attrs.CompressionType()] = true
			if r.ProducerID < 0 {
				notIdempotent[who]++
			}
		})
	}
	for who, n := range notIdempotent {
		t.Errorf("%d records of %s without a producer ID, want every one written idempotently", n, who)
	}
	out := map[string][]uint8{}
	for who, cs := range seen {
		for c := range uint8(5) {
			if cs[c] {
				out[who] = append(out[who], c)
			}
		}
	}
	return out
}

// lastHandled is the highest offset of partition p that Do finished.
func (o *oracle) lastHandled(p int32) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	last := int64(-1)
	for k := range o.comps {
		if k.p == p {
			last = max(last, k.off)
		}
	}
	return last
}

// abortedRecords are records of a transaction that is aborted: never to reach Do.
func abortedRecords(topic string, n int, key func(i int) []byte) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{Topic: topic, Key: key(i), Value: []byte("aborted")}
	}
	return out
}

// TestScenario12Transactions: a kgo transactional producer (zstd) commits
// and aborts transactions in turn on the keys 0-9, while a kgo idempotent
// producer (lz4) writes the keys 10-19 to the same partitions between
// them, all under a running group; the last transaction is aborted, so
// every partition ends in an abort marker. No aborted record reaches Do,
// and the committed offsets reach the high watermarks, past the markers.
func TestScenario12Transactions(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, rounds, perKey, size = 2, 8, 4, 200
	var p plan12
	type round struct{ txn, plain []rec12 }
	var plan []round
	for range rounds {
		var rd round
		for i := range 10 * perKey {
			k := uint32(i % 10)
			rd.txn = append(rd.txn, p.next(k, fmt.Appendf(nil, "k%d", k), 0, false, size))
			k += 10
			rd.plain = append(rd.plain, p.next(k, fmt.Appendf(nil, "k%d", k), 0, i%7 == 6, size))
		}
		plan = append(plan, rd)
	}
	s := startScenario12(t, "12 real producers: kgo transactions committed and aborted, idempotent records between", "txn12", partitions, nil, p.counts)
	addrs := s.b.Addrs()
	txn := newKgo(t, addrs, kgo.TransactionalID("orderly-scenario-12"), kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.RecordPartitioner(saramaCompat()))
	plain := kgoProducer(t, addrs, "kgo-idempotent", kgo.Lz4Compression())
	stop := s.c.start(t, s.cfg)
	s.waitClaimed(t, partitions)
	abortAll := func() []*kgo.Record {
		return abortedRecords(s.o.topic, 10*perKey, func(i int) []byte { return fmt.Appendf(nil, "k%d", i%10) })
	}
	for _, rd := range plan {
		transaction(t, txn, true, kgoRecords("kgo-transactional", s.o.topic, rd.txn)...)
		transaction(t, txn, false, abortAll()...)
		plain.produce(t, s.o.topic, rd.plain)
		time.Sleep(100 * time.Millisecond) // consumed and committed as they come
	}
	transaction(t, txn, false, abortAll()...)
	s.finish(t, stop, want{all: true, deleted: 0})
	// The logs end in aborted records and their marker (above the last
	// record handled, which the oracle found to be every readable one):
	// the commits passed them.
	hw, committed := s.b.HighWatermarks(s.o.topic), s.b.Committed(s.cfg.GroupID, s.o.topic)
	for part := range int32(partitions) {
		if last := s.o.lastHandled(part); last+1 >= hw[part] || committed[part] != hw[part] {
			t.Errorf("partition %d: last readable record %d, high watermark %d, committed %d; want the log to end in markers and the commit at the high watermark",
				part, last, hw[part], committed[part])
		}
	}
	st := s.c.g.Load().Stats()
	if st.ControlSkipped == 0 {
		t.Errorf("Stats.ControlSkipped: got 0, want the markers and aborted records passed counted")
	}
	t.Logf("%d transactions committed, %d aborted; high watermarks %v, committed %v; %d offsets passed as control or aborted", rounds, rounds+1, hw, committed, st.ControlSkipped)
}

// logGaps counts the holes in each partition's readable offsets (a first
// offset above 0 counts as one).
func logGaps(records map[int32][]int64) int {
	n := 0
	for _, offs := range records {
		next := int64(0)
		for _, off := range offs {
			if off != next {
				n++
			}
			next = off + 1
		}
	}
	return n
}

// TestScenario12Compacted: a compacted topic (cleanup.policy=compact).
// kgo writes 20 keys in rounds, each key in two rounds of three (one batch
// per round), 10 rounds, with tombstones for a quarter of the keys in
// round 8, never written again; the log is compacted, leaving gaps; a
// group starts on it and 5 more rounds come while it runs, with another
// compaction in the middle. Every record still readable is handled in key
// order, tombstones included, and the commits reach the high watermarks
// across the gaps.
func TestScenario12Compacted(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, keys, before, during, size = 2, 20, 10, 5, 100
	var p plan12
	rounds := make([][]rec12, before+during)
	for r := range rounds {
		for k := range uint32(keys) {
			deleted := k%4 == 0 && r >= 8
			if (r+int(k))%3 == 0 || (deleted && r > 8) {
				continue
			}
			rounds[r] = append(rounds[r], p.next(k, fmt.Appendf(nil, "k%d", k), 0, deleted, size))
		}
	}
	s := startScenario12(t, "12 real producers: a compacted topic with gaps", "compacted", partitions, map[string]string{"cleanup.policy": "compact"}, p.counts)
	addrs := s.b.Addrs()
	prod := kgoProducer(t, addrs, "kgo-gzip", kgo.GzipCompression())
	for _, recs := range rounds[:before] {
		prod.produce(t, s.o.topic, recs)
	}
	s.b.Cluster().Compact()
	if n := logGaps(readable(t, addrs, s.o.topic)); n < 2*partitions {
		t.Fatalf("after compaction: %d gaps in the log, want at least %d (did kfake compact?)", n, 2*partitions)
	}
	stop := s.c.start(t, s.cfg)
	s.waitClaimed(t, partitions)
	for i, recs := range rounds[before:] {
		prod.produce(t, s.o.topic, recs)
		if i == during/2 {
			s.b.Cluster().Compact()
		}
		time.Sleep(100 * time.Millisecond)
	}
	v := s.finish(t, stop, want{all: true, deleted: -1})
	n := logGaps(readable(t, addrs, s.o.topic))
	if v.Deleted == 0 || n < 2*partitions || s.c.nulls == 0 {
		t.Errorf("compaction: %d records deleted, %d gaps, %d tombstones handled; want some deleted, at least %d gaps, and tombstones", v.Deleted, n, s.c.nulls, 2*partitions)
	}
	t.Logf("%d records produced, %d compacted away, %d gaps in the log; %d tombstones handled", v.Produced, v.Deleted, n, s.c.nulls)
}

// TestScenario12NearMaxMessageBytes: records whose batches come within
// 250 bytes of the broker's max.message.bytes (1048588, Kafka's default:
// a record 250 bytes larger is refused),
// from kgo and from sarama (idempotent), consumed with the fetch sizes of
// DefaultSarama and with a 64 KiB Consumer.Fetch.Default, which every
// record exceeds (the broker returns the first batch whole, and sarama
// grows its fetch).
func TestScenario12NearMaxMessageBytes(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, keys, perKey, maxBytes = 2, 4, 2, 1048588
	const size = maxBytes - 61 - 200 - ledger.HeaderSize // batch header 61 bytes, record header and headers under 200
	for _, fetch := range []int32{0, 64 << 10} {
		t.Run(fmt.Sprintf("fetch %d", fetch), func(t *testing.T) {
			var p plan12
			var viaSarama, viaKgo []rec12
			for i := range keys * perKey {
				k := uint32(i % keys)
				viaSarama = append(viaSarama, p.next(k, fmt.Appendf(nil, "k%d", k), 0, false, size))
			}
			for i := range keys * perKey {
				k := uint32(i % keys)
				viaKgo = append(viaKgo, p.next(k, fmt.Appendf(nil, "k%d", k), 0, false, size))
			}
			s := startScenario12(t, fmt.Sprintf("12 real producers: records near max.message.bytes, fetch %d", fetch), "large", partitions, nil, p.counts)
			if fetch > 0 {
				s.cfg.Sarama.Consumer.Fetch.Default = fetch
			}
			addrs := s.b.Addrs()
			sp := saramaProducer(t, addrs, "sarama-none", sarama.CompressionNone, maxBytes)
			kp := kgoProducer(t, addrs, "kgo-none", kgo.NoCompression(), kgo.ProducerBatchMaxBytes(maxBytes))
			stop := s.c.start(t, s.cfg)
			s.waitClaimed(t, partitions)
			for _, r := range viaSarama {
				sp.produce(t, s.o.topic, []rec12{r})
			}
			for _, r := range viaKgo {
				kp.produce(t, s.o.topic, []rec12{r})
			}
			s.finish(t, stop, want{all: true, deleted: 0})
			// Near the limit: a record 250 bytes larger is refused by
			// the broker (kgo's own limit raised out of the way).
			big := newKgo(t, addrs, kgo.ProducerBatchMaxBytes(2*maxBytes), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(0))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			over := rec12{key: 0, seq: 1 << 20, kafkaKey: []byte("k0"), size: size + 250} // never consumed
			err := big.ProduceSync(ctx, kgoRecords("kgo-over", s.o.topic, []rec12{over})...).FirstErr()
			if !errors.Is(err, kerr.MessageTooLarge) {
				t.Errorf("a record 250 bytes larger: got %v, want MESSAGE_TOO_LARGE from the broker", err)
			}
		})
	}
}
