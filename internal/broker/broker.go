// Package broker runs an in-process Kafka-protocol broker (franz-go's kfake)
// for the demo, the benchmarks, the tests and `orderly broker`. Clients talk
// to it over loopback with the real Kafka protocol.
//
// It is one broker with no replication, and its classic group coordinator
// differs from Kafka's where consumer processes die mid-rebalance (issue
// 11): a member killed while its JoinGroup is parked can stay in the group
// with no session timer, the rebalance deadline restarts on every join, and
// a live member parked in JoinGroup is expired after its session timeout
// with its request never answered (the client waits for its read timeout).
// coordinator_test.go pins each of these; internal/wedge reproduces what
// they do to a group of SIGKILLed and restarted processes. Static
// membership (sarama's Consumer.Group.InstanceId) avoids them when a killed
// process comes back within the session timeout.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Config describes the broker to start.
type Config struct {
	// Addr is the host:port to listen on (port 0: a free port). Default "":
	// a random free port on 127.0.0.1.
	Addr string
	// DataDir makes the broker persist its logs, offsets and groups there
	// and reload them on start (kfake's DataDir), created if missing. The
	// broker holds the lock of the file LockFile in it until Close (on
	// unix and Windows, see internal/flock): a second broker on the same
	// DataDir, in this process or another, is refused with a
	// *DataDirError that wraps a *flock.HeldError (matching flock.ErrHeld)
	// naming the lock file and its holder; a DataDir that cannot be
	// created is a *DataDirError too. Default "": memory only.
	DataDir string
	// SyncWrites fsyncs every produced batch (kfake's SyncWrites). Only
	// meaningful with DataDir.
	SyncWrites bool
	// Topics are created at start with Partitions partitions each; one
	// that exists already (reloaded from DataDir) is kept as it is, with
	// its partitions and records, whatever its partition count.
	Topics []string
	// Partitions per topic in Topics. Default 8.
	Partitions int32
	// Brokers is the number of brokers in the cluster (leaders and
	// coordinators spread over them), on free ports: Addr must then be
	// "". Default 1.
	Brokers int
	// MaxSessionTimeout is the longest consumer group session timeout
	// the coordinator accepts (Kafka's group.max.session.timeout.ms).
	// Default 30 minutes, Kafka's.
	MaxSessionTimeout time.Duration
}

// Broker is a running in-process broker.
type Broker struct {
	c    *kfake.Cluster
	lock *os.File // held on Config.DataDir, nil without one
}

// ErrBadAddr reports an Addr that is not host:port.
var ErrBadAddr = errors.New("broker: bad listen address")

// ErrListen: Start could not listen on Config.Addr (its port is taken,
// its host is not one of this machine's addresses or does not resolve).
// The error names the address.
var ErrListen = errors.New("broker: cannot listen")

// LockFile is the file in Config.DataDir whose lock a broker holds.
const LockFile = "broker.lock"

// DataDirError is Start's error when it cannot create Config.DataDir or
// take its lock: Err says why, without the directory, so that a caller
// that names the directory its own way (`orderly broker` names --data)
// can use Err alone.
type DataDirError struct {
	Dir string
	Err error
}

func (e *DataDirError) Error() string {
	return fmt.Sprintf("broker: data directory %s: %v", e.Dir, e.Err)
}

func (e *DataDirError) Unwrap() error { return e.Err }

// Start starts a broker.
func Start(cfg Config) (*Broker, error) {
	if cfg.Partitions == 0 {
		cfg.Partitions = 8
	}
	if cfg.Partitions < 0 {
		return nil, fmt.Errorf("broker: partitions %d: must be positive", cfg.Partitions)
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = 30 * time.Minute
	}
	opts := []kfake.Opt{kfake.NumBrokers(max(cfg.Brokers, 1)), kfake.ClusterID("orderly"),
		kfake.GroupMaxSessionTimeout(cfg.MaxSessionTimeout)}
	if cfg.Addr != "" {
		host, portStr, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrBadAddr, cfg.Addr, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port < 0 || port > 65535 {
			return nil, fmt.Errorf("%w %q: port %q must be a number in 0-65535", ErrBadAddr, cfg.Addr, portStr)
		}
		if host == "" { // the address printed for clients must be dialable
			return nil, fmt.Errorf("%w %q: give a host, e.g. 127.0.0.1%s", ErrBadAddr, cfg.Addr, cfg.Addr)
		}
		opts = append(opts, kfake.Ports(port), kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrListen, err)
			}
			return ln, nil
		}))
	}
	var lock *os.File
	if cfg.DataDir != "" {
		// Locked before kfake reads or writes anything there.
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, &DataDirError{Dir: cfg.DataDir, Err: err}
		}
		var err error
		if lock, err = lockData(cfg.DataDir); err != nil {
			return nil, err
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.SyncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		closeLock(lock)
		if errors.Is(err, ErrListen) { // it names the address, and the data is not the cause
			return nil, err
		}
		return nil, fmt.Errorf("broker: start on %q (data %q): %w", cfg.Addr, cfg.DataDir, err)
	}
	b := &Broker{c: c, lock: lock}
	for _, t := range cfg.Topics {
		if c.TopicInfo(t) != nil {
			continue // reloaded from DataDir: kept as it is
		}
		if err := b.CreateTopic(t, cfg.Partitions); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// closeLock lets go of a data directory's lock (nil: none).
func closeLock(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// Addrs are the bootstrap addresses to give a client.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker; with a DataDir it flushes state to disk first,
// then lets go of the directory's lock.
func (b *Broker) Close() {
	b.c.Close()
	closeLock(b.lock)
}

// CreateTopic creates topic with the given partition count. A topic that
// already exists with at least that many partitions is not an error (a
// persisted broker reloads its topics).
func (b *Broker) CreateTopic(topic string, partitions int32) error {
	if ti := b.c.TopicInfo(topic); ti != nil {
		if int32(len(b.c.PartitionInfos(topic))) >= partitions {
			return nil
		}
	}
	if err := b.c.CreateTopic(topic, partitions, nil); err != nil {
		return fmt.Errorf("broker: create topic %q with %d partitions: %w", topic, partitions, err)
	}
	return nil
}

// HighWatermarks returns each partition's high watermark (the next offset
// to be written) for topic.
func (b *Broker) HighWatermarks(topic string) map[int32]int64 {
	out := make(map[int32]int64)
	for _, pi := range b.c.PartitionInfos(topic) {
		out[pi.Partition] = pi.HighWatermark
	}
	return out
}

// LogStartOffsets returns each partition's log start offset (the first
// offset still present, moved by DeleteRecords) for topic.
func (b *Broker) LogStartOffsets(topic string) map[int32]int64 {
	out := make(map[int32]int64)
	for _, pi := range b.c.PartitionInfos(topic) {
		out[pi.Partition] = pi.LogStartOffset
	}
	return out
}

// Topics returns every topic the broker serves and its partition count:
// those of Config.Topics and those reloaded from Config.DataDir, and any a
// client created. It asks the broker, with a Metadata request for all
// topics, as a client would.
func (b *Broker) Topics(ctx context.Context) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		return nil, fmt.Errorf("broker: list topics: %w", err)
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // no topics named: all of them
	if err != nil {
		return nil, fmt.Errorf("broker: list topics: %w", err)
	}
	out := make(map[string]int, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("broker: list topics: topic %s: %w", *t.Topic, err)
		}
		out[*t.Topic] = len(t.Partitions)
	}
	return out, nil
}

// Committed returns group's committed offsets for topic, by partition; a
// partition with no commit is absent.
func (b *Broker) Committed(group, topic string) map[int32]int64 {
	out := make(map[int32]int64)
	gi := b.c.GroupInfo(group)
	if gi == nil {
		return out
	}
	for p, c := range gi.Commits[topic] {
		out[p] = c.Offset
	}
	return out
}

// Commit is a committed offset and its metadata, as the broker holds it.
type Commit struct {
	Offset   int64
	Metadata string
	At       time.Time
}

// Commits returns group's commits on topic, by partition, with their
// metadata; a partition with no commit is absent.
func (b *Broker) Commits(group, topic string) map[int32]Commit {
	out := make(map[int32]Commit)
	gi := b.c.GroupInfo(group)
	if gi == nil {
		return out
	}
	for p, c := range gi.Commits[topic] {
		out[p] = Commit{Offset: c.Offset, Metadata: c.Metadata, At: c.At}
	}
	return out
}

// ObserveCommits calls fn for every OffsetCommit request the broker
// receives, before handling it normally. fn runs on the broker's loop: it
// must not block or call back into the broker.
func (b *Broker) ObserveCommits(fn func(*kmsg.OffsetCommitRequest)) {
	b.c.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		if r, ok := req.(*kmsg.OffsetCommitRequest); ok {
			fn(r)
		}
		return nil, nil, false
	})
}

// RejectCommitMetadata makes the broker answer OffsetCommit requests whose
// partitions carry metadata longer than limit bytes with
// OFFSET_METADATA_TOO_LARGE for those partitions, as a Kafka broker with
// offset.metadata.max.bytes = limit does; requests whose metadata fits are
// handled normally. A request that mixes partitions whose metadata fits
// with ones whose metadata does not is answered with an error for the
// latter and without committing the former: use it with one partition.
func (b *Broker) RejectCommitMetadata(limit int) {
	b.c.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		r, ok := req.(*kmsg.OffsetCommitRequest)
		if !ok {
			return nil, nil, false
		}
		tooLarge := false
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				tooLarge = tooLarge || (p.Metadata != nil && len(*p.Metadata) > limit)
			}
		}
		if !tooLarge {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				if p.Metadata != nil && len(*p.Metadata) > limit {
					rp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// RefuseProduce makes the broker answer, while refusing reports true,
// every Produce request that writes to topic with NOT_ENOUGH_REPLICAS for
// all its partitions (what a Kafka cluster with too few in-sync replicas
// for acks=all answers); it counts each refused request with refused.
// Requests are otherwise handled normally. A request that also writes to
// another topic is refused whole: use it for a topic its own producer
// writes.
func (b *Broker) RefuseProduce(topic string, refusing func() bool, refused func()) {
	b.c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		r, ok := req.(*kmsg.ProduceRequest)
		if !ok || !refusing() {
			return nil, nil, false
		}
		hit := false
		for _, t := range r.Topics {
			hit = hit || t.Topic == topic
		}
		if !hit {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.NotEnoughReplicas.Code
				rp.BaseOffset = -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if refused != nil {
			refused()
		}
		return resp, nil, true
	})
}

// RefuseOffsetFetch makes the broker answer every OffsetFetch request
// that refusing reports true for with COORDINATOR_LOAD_IN_PROGRESS (what a
// coordinator still loading its offsets answers, for the request and, from
// version 8, for each group asked); it counts each refused request with
// refused. refusing runs on the broker's loop, for every OffsetFetch:
// it must not block. Other requests are handled normally.
func (b *Broker) RefuseOffsetFetch(refusing func(*kmsg.OffsetFetchRequest) bool, refused func()) {
	b.c.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		r, ok := req.(*kmsg.OffsetFetchRequest)
		if !ok || !refusing(r) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.SetVersion(r.GetVersion())
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		for _, g := range r.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, kerr.CoordinatorLoadInProgress.Code
			resp.Groups = append(resp.Groups, rg)
		}
		if refused != nil {
			refused()
		}
		return resp, nil, true
	})
}

// CaughtUp reports whether group's committed offsets on topic equal the
// high watermarks of every partition. A topic with no partitions (not
// created, or misspelt) is never caught up.
func (b *Broker) CaughtUp(group, topic string) bool {
	return CaughtUpTo(b.Committed(group, topic), b.HighWatermarks(topic))
}

// CaughtUpTo reports whether hw has partitions and committed holds each at
// its high watermark (a partition absent from committed counts as 0).
func CaughtUpTo(committed, hw map[int32]int64) bool {
	if len(hw) == 0 {
		return false
	}
	for p, h := range hw {
		if committed[p] != h {
			return false
		}
	}
	return true
}

var (
	// ErrNotCaughtUp: WaitUntil or WaitCaughtUp gave up when its context
	// ended.
	ErrNotCaughtUp = errors.New("broker: gave up waiting for the consumer to catch up")
	// ErrEndedEarly: the consumer WaitUntil or WaitCaughtUp runs returned
	// before it caught up.
	ErrEndedEarly = errors.New("broker: the consumer returned before catching up")
)

// WaitCaughtUp runs fn (a consumer of topic as group) until the group's
// committed offsets equal the high watermarks (CaughtUp), then cancels
// fn's context and returns fn's error. See WaitUntil for when fn returns
// first or ctx ends first; then the error also shows the committed offsets
// and the high watermarks.
func (b *Broker) WaitCaughtUp(ctx context.Context, group, topic string, fn func(context.Context) error) error {
	err := WaitUntil(ctx, func() bool { return b.CaughtUp(group, topic) }, fn)
	if errors.Is(err, ErrNotCaughtUp) || errors.Is(err, ErrEndedEarly) {
		return fmt.Errorf("group %s on %s: committed %v, high watermarks %v: %w",
			group, topic, b.Committed(group, topic), b.HighWatermarks(topic), err)
	}
	return err
}

// WaitUntil runs fn (a consumer) until caughtUp, polled every 20ms on the
// calling goroutine, reports true; then it cancels fn's context and
// returns fn's error. If fn returns first, it returns ErrEndedEarly
// wrapping fn's error. If ctx ends first, it cancels fn and returns
// ErrNotCaughtUp wrapping context.Cause(ctx), joined with fn's error.
func WaitUntil(ctx context.Context, caughtUp func() bool, fn func(context.Context) error) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- fn(runCtx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !caughtUp() {
		var err error
		select {
		case <-tick.C:
			continue
		case err = <-done:
		case <-ctx.Done():
			stop()
			err = <-done
		}
		switch {
		case ctx.Err() != nil: // fn may have returned because ctx ended
			return errors.Join(fmt.Errorf("%w: %w", ErrNotCaughtUp, context.Cause(ctx)), err)
		case err == nil:
			return ErrEndedEarly
		}
		return fmt.Errorf("%w: %w", ErrEndedEarly, err)
	}
	stop()
	return <-done
}

// StallHeartbeat makes the broker hold the next Heartbeat request until
// release returns, then handle it; what the client sends behind it on the
// same connection waits too, as behind a network stall. Held longer than
// the session timeout, the member is evicted meanwhile.
func (b *Broker) StallHeartbeat(release func()) {
	b.c.ControlKey(kmsg.Heartbeat.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.c.DropControl()
		b.c.SleepControl(release)
		return nil, nil, false
	})
}

// ResetCommitted commits offsets for group on topic as an admin tool does
// (generation -1, no member): Kafka accepts it only while the group has
// no members.
func (b *Broker) ResetCommitted(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	// OffsetCommit v10 names topics by ID: stay below it, naming them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.MaxVersions(kversion.V3_8_0()))
	if err != nil {
		return fmt.Errorf("broker: reset offsets of group %q: %w", group, err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for p, off := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, off
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("broker: reset offsets of group %q: %w", group, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("broker: reset offset of group %q on %s/%d: %w", group, t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}
