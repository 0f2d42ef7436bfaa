// Package loadgen produces test and demo traffic to a Kafka cluster through
// sarama, generates key distributions (uniform, Zipf) for it, and decides
// which simulated handler calls fail (Fails).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/IBM/sarama"
)

// Record is one message to produce.
type Record struct {
	Key   []byte
	Value []byte
	// Pinned sends the record to Partition; otherwise the key's hash
	// picks the partition.
	Pinned    bool
	Partition int32
}

// pinned marks a ProducerMessage whose Partition was chosen by its Record.
type pinned struct{}

// pinnedOrHash partitions pinned records by their Partition, the rest by
// sarama's key hash.
type pinnedOrHash struct{ hash sarama.Partitioner }

func (p pinnedOrHash) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if _, ok := m.Metadata.(pinned); ok {
		return m.Partition, nil
	}
	return p.hash.Partition(m, n)
}

func (p pinnedOrHash) RequiresConsistency() bool { return true }

// Gen returns the i-th record to produce. It may reuse nothing: the producer
// holds on to Key and Value until the record is acknowledged.
type Gen func(i int) Record

// Produce writes n records from gen to topic, partitioned by key hash
// (sarama's default partitioner, the same as the Java client's for
// non-empty keys modulo hash function), and returns once every record is
// acknowledged by the broker.
func Produce(ctx context.Context, addrs []string, topic string, n int, gen Gen) error {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.ClientID = "orderly-loadgen"
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = sarama.WaitForLocal
	cfg.Producer.Flush.Messages = 2000
	cfg.Producer.Flush.MaxMessages = 5000
	cfg.Producer.Flush.Frequency = 5e6 // 5ms
	cfg.Producer.MaxMessageBytes = 4 << 20
	cfg.ChannelBufferSize = 4096
	cfg.Producer.Partitioner = func(topic string) sarama.Partitioner {
		return pinnedOrHash{sarama.NewHashPartitioner(topic)}
	}
	p, err := sarama.NewAsyncProducer(addrs, cfg)
	if err != nil {
		return fmt.Errorf("loadgen: connect to %v: %w", addrs, err)
	}
	// acked counts n acknowledgements, or stops early when the producer
	// closes both channels (after AsyncClose on cancellation).
	acked := make(chan error, 1)
	go func() {
		var firstErr error
		succ, errs := p.Successes(), p.Errors()
		for got := 0; got < n && (succ != nil || errs != nil); {
			select {
			case _, ok := <-succ:
				if !ok {
					succ = nil
					continue
				}
				got++
			case perr, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				got++
				if firstErr == nil {
					firstErr = fmt.Errorf("loadgen: produce to %s partition %d: %w", topic, perr.Msg.Partition, perr.Err)
				}
			}
		}
		acked <- firstErr
	}()
	var sendErr error
	for i := 0; i < n && sendErr == nil; i++ {
		r := gen(i)
		m := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(r.Value)}
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		if r.Pinned {
			m.Partition, m.Metadata = r.Partition, pinned{}
		}
		select {
		case p.Input() <- m:
		case <-ctx.Done():
			sendErr = ctx.Err()
		}
	}
	if sendErr != nil {
		p.AsyncClose()
		// acked drains both channels until the producer closes them; a
		// record that failed before the cancellation is reported too.
		return errors.Join(fmt.Errorf("loadgen: produce to %s: %w", topic, sendErr), <-acked)
	}
	err = <-acked
	return errors.Join(err, p.Close())
}

// Keys picks key indexes in [0, n).
type Keys interface {
	Next() int
}

// Uniform picks keys uniformly at random.
type Uniform struct {
	n int
	r *rand.Rand
}

// NewUniform returns uniform keys in [0, n) from a fixed seed.
func NewUniform(n int, seed uint64) *Uniform {
	return &Uniform{n: n, r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
}

// Next returns the next key index.
func (u *Uniform) Next() int { return u.r.IntN(u.n) }

// Zipf picks keys with probability proportional to 1/(k+1)^s, key 0 being
// the hottest. Unlike math/rand's Zipf it accepts any s > 0 (s=1.1 with 10k
// keys puts about 15% of draws on key 0).
type Zipf struct {
	cdf []float64
	r   *rand.Rand
}

// NewZipf returns Zipf(s) keys in [0, n) from a fixed seed.
func NewZipf(n int, s float64, seed uint64) *Zipf {
	cdf := make([]float64, n)
	var sum float64
	for k := 0; k < n; k++ {
		sum += 1 / math.Pow(float64(k+1), s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return &Zipf{cdf: cdf, r: rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))}
}

// Next returns the next key index.
func (z *Zipf) Next() int {
	u := z.r.Float64()
	lo, hi := 0, len(z.cdf)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if z.cdf[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Fails decides which calls of a simulated handler fail: the attempt-th
// call whose first message is partition/offset fails with probability
// rate. The draw is a hash of seed, partition, offset and attempt, so the
// same calls fail whatever the scheduling, and a retry is a fresh draw.
func Fails(rate float64, seed uint64, partition int32, offset int64, attempt int) bool {
	if rate <= 0 {
		return false
	}
	h := splitmix64(uint64(partition)<<48 ^ uint64(offset) ^ uint64(attempt)<<40 ^ splitmix64(seed))
	return float64(h>>11)/(1<<53) < rate
}

// splitmix64 is a fast, well-mixed 64-bit hash (Steele et al.).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
