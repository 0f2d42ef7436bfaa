package group

import (
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/rcrowley/go-metrics"
	"go.uber.org/zap"
)

// DefaultMetadataRefresh is DefaultSarama's Metadata.RefreshFrequency.
// sarama's group leader compares the partition counts of the subscribed
// topics with its cached metadata once per RefreshFrequency, and the
// cache itself is refreshed once per RefreshFrequency, so partitions added
// to a topic are claimed (from their start, with OffsetOldest) at most two
// periods later, one minute here, plus the rebalance; sarama's own default
// (10 minutes) made it up to 20.
const DefaultMetadataRefresh = 30 * time.Second

// DefaultFetchMaxWait is DefaultSarama's Consumer.MaxWaitTime: how long
// the broker may hold a fetch request that finds no new data. Orderly
// pauses a partition's fetching while the partition holds its in-flight
// share (Config.MaxInFlight), and sarama sends one fetch at a time per
// broker, for the partitions not paused. When those are caught up, the
// broker holds that fetch for the whole wait, and a partition resumed
// meanwhile is fetched only after it returns: a backlogged partition can
// stand idle for up to the wait after each resume while the others have
// nothing new (docs/SCALING.md has the measurement). A commit also waits
// behind that fetch on the shared connection. The cost of a shorter wait
// is an empty fetch per broker every 100 ms while there is nothing to
// read.
const DefaultFetchMaxWait = 100 * time.Millisecond

// saramaFor returns the client config of one Group: a copy of base that
// shares no mutable state with base or with another Group built from it.
//
// A plain struct copy shares what base points to. Two parts of that are
// written while a group runs: the balance strategies (sarama's sticky and
// cooperative-sticky strategies keep their partition movements in the
// strategy object, written by every Plan: two groups sharing one raced)
// and the metrics registry (every client registers and updates its
// meters in it). The built-in strategies are therefore made again by
// name, and each Group gets a registry of its own. A strategy of the
// user's own (any other type) is kept as given, shared: Orderly cannot
// copy it, and it must be safe for concurrent use or be given to one
// Group only. Everything else sarama only reads (TLS config, SASL
// callbacks, interceptors, the partitioner constructor).
func saramaFor(base *sarama.Config) *sarama.Config {
	copied := *base
	sc := &copied
	sc.MetricRegistry = metrics.NewRegistry()
	if s := base.Consumer.Group.Rebalance.GroupStrategies; s != nil {
		sc.Consumer.Group.Rebalance.GroupStrategies = make([]sarama.BalanceStrategy, len(s))
		for i, st := range s {
			sc.Consumer.Group.Rebalance.GroupStrategies[i] = freshStrategy(st)
		}
	}
	// The deprecated single Strategy, which sarama still reads (in
	// place of GroupStrategies when set).
	if st := base.Consumer.Group.Rebalance.Strategy; st != nil {
		sc.Consumer.Group.Rebalance.Strategy = freshStrategy(st)
	}
	return sc
}

// builtinStrategyMakers make sarama's built-in balance strategies, in the
// order BalanceStrategyNames lists them.
var builtinStrategyMakers = []func() sarama.BalanceStrategy{
	sarama.NewBalanceStrategyCooperativeSticky,
	sarama.NewBalanceStrategySticky,
	sarama.NewBalanceStrategyRange,
	sarama.NewBalanceStrategyRoundRobin,
}

// builtinStrategy is one of sarama's strategies: its dynamic type, so that
// a user's own strategy that happens to use a built-in name is not
// replaced, and how to make a new instance.
type builtinStrategy struct {
	typ  string
	make func() sarama.BalanceStrategy
}

// builtinStrategies are sarama's strategies by name.
var builtinStrategies = func() map[string]builtinStrategy {
	out := map[string]builtinStrategy{}
	for _, mk := range builtinStrategyMakers {
		s := mk()
		out[s.Name()] = builtinStrategy{fmt.Sprintf("%T", s), mk}
	}
	return out
}()

// BalanceStrategyNames are the names of sarama's built-in balance
// strategies (Kafka's partition.assignment.strategy names):
// cooperative-sticky, sticky, range, roundrobin.
func BalanceStrategyNames() []string {
	names := make([]string, len(builtinStrategyMakers))
	for i, mk := range builtinStrategyMakers {
		names[i] = mk().Name()
	}
	return names
}

// NewBalanceStrategy returns a new instance of sarama's built-in balance
// strategy called name (see BalanceStrategyNames), or false if there is
// none.
func NewBalanceStrategy(name string) (sarama.BalanceStrategy, bool) {
	b, ok := builtinStrategies[name]
	if !ok {
		return nil, false
	}
	return b.make(), true
}

// freshStrategy returns a new instance of a built-in strategy, or st
// itself when it is not one of sarama's (see saramaFor).
func freshStrategy(st sarama.BalanceStrategy) sarama.BalanceStrategy {
	if st == nil {
		return nil
	}
	if b, ok := builtinStrategies[st.Name()]; ok && b.typ == fmt.Sprintf("%T", st) {
		return b.make()
	}
	return st
}

// offeredStrategies are the balance strategies sc offers when the group
// joins: the deprecated Strategy when set (sarama gives it precedence),
// else GroupStrategies.
func offeredStrategies(sc *sarama.Config) []sarama.BalanceStrategy {
	r := sc.Consumer.Group.Rebalance
	if r.Strategy != nil {
		return []sarama.BalanceStrategy{r.Strategy}
	}
	return r.GroupStrategies
}

// strategyNames are the names of offeredStrategies.
func strategyNames(sc *sarama.Config) []string {
	ss := offeredStrategies(sc)
	names := make([]string, len(ss))
	for i, st := range ss {
		names[i] = st.Name()
	}
	return names
}

// cooperative reports whether the group rebalances cooperatively with sc:
// when every strategy offered supports the cooperative protocol (sarama's
// rule); otherwise the protocol is eager.
func cooperative(sc *sarama.Config) bool {
	ss := offeredStrategies(sc)
	for _, s := range ss {
		p, ok := s.(sarama.RebalanceProtocolBalanceStrategy)
		if !ok || !slices.Contains(p.SupportedProtocols(), sarama.RebalanceProtocolCooperative) {
			return false
		}
	}
	return len(ss) > 0
}

// joinReadPast is how much longer than joinWait an eager member waits for
// the answer to its JoinGroup: the Java client's margin past the rebalance
// timeout, here for the final commit's round trip, sarama's own end of
// the session, the join itself and the network.
const joinReadPast = 5 * time.Second

// joinWait is how long the coordinator can take to answer an eager
// member's JoinGroup when every member has c's timeouts. It answers once
// every member has joined again, and a member does so only once all its
// claims have let go: it learns of the rebalance at its next heartbeat
// (Heartbeat.Interval), then each claim drains (up to DrainTimeout),
// commits, and reads its final commit back (up to a quarter of
// Rebalance.Timeout, ending by releaseWindow after the claim began to let
// go, unless the drain itself ran past that). A member that takes longer
// (one that died mid-rebalance, until its session timeout; one of another
// client, up to the longest rebalance timeout in the group) fails the
// others' JoinGroups with an i/o timeout, and their Run joins again.
func joinWait(c Config) time.Duration {
	g := c.Sarama.Consumer.Group
	release := max(c.DrainTimeout, min(releaseWindow(c.Sarama), c.DrainTimeout+readBackBudget(c.Sarama)))
	return g.Heartbeat.Interval + release
}

// raiseJoinReadTimeout raises c.Sarama's Net.ReadTimeout, under an eager
// protocol, to at least joinWait plus joinReadPast: sarama waits for any
// answer only Net.ReadTimeout (IBM/sarama#2820), and a JoinGroup that
// times out closes the connection to the coordinator and fails Consume.
// sarama has one read timeout for every request, so the raise also delays
// noticing a broker or coordinator that stops answering (a heartbeat, a
// fetch, a commit): it is as small as the join allows, and warnRaise
// says so. A cooperative rebalance does not wait for drains: there the
// read timeout stays as given. c.DrainTimeout must be set.
func raiseJoinReadTimeout(c Config) {
	if cooperative(c.Sarama) {
		return
	}
	c.Sarama.Net.ReadTimeout = max(c.Sarama.Net.ReadTimeout, joinWait(c)+joinReadPast)
}

// saramaReadTimeout is sarama's default Net.ReadTimeout: a base config
// with another one set it.
var saramaReadTimeout = sarama.NewConfig().Net.ReadTimeout

// warnRaise logs the Net.ReadTimeout raiseJoinReadTimeout raised in c,
// given set's: a warning when set's is not sarama's default (the user
// chose it, most likely to notice a dead broker soon), info otherwise.
func (c Config) warnRaise(set Config, log *zap.Logger) {
	given := saramaReadTimeout
	if set.Sarama != nil {
		given = set.Sarama.Net.ReadTimeout
	}
	if c.Sarama.Net.ReadTimeout == given {
		return
	}
	at := log.Info
	if given != saramaReadTimeout {
		at = log.Warn
	}
	at("Net.ReadTimeout raised: under an eager rebalance protocol a JoinGroup waits for the other members' drains, and sarama waits for any answer only Net.ReadTimeout; a broker or coordinator that stops answering is noticed only after it (a cooperative strategy keeps it as set)",
		zap.Strings("strategies", strategyNames(c.Sarama)), zap.Duration("net_read_timeout_set", given),
		zap.Duration("net_read_timeout", c.Sarama.Net.ReadTimeout), zap.Duration("drain_timeout", c.DrainTimeout),
		zap.Duration("rebalance_timeout", c.Sarama.Consumer.Group.Rebalance.Timeout))
}

// ValidInstanceID reports whether id is a usable Config.InstanceID ("" is:
// no static membership). Kafka's rule for group.instance.id, which is its
// rule for topic names: at most 249 of [a-zA-Z0-9._-], and not "." or "..".
func ValidInstanceID(id string) bool {
	if id == "" {
		return true
	}
	if len(id) > 249 || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		ok := r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}
