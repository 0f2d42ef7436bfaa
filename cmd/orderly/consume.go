package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/flock"
	"github.com/orderly-go/orderly/localqueue"
)

// consumeOpts are `orderly consume`'s flags.
type consumeOpts struct {
	brokers []string
	topics  []string
	group   string
	// strategies are the group's assignment strategies, by name.
	strategies     []string
	instanceID     string
	offsetReset    string
	sessionTimeout time.Duration

	httpURL  string
	headers  []string
	httpCA   string
	execCmd  string
	noCheck  bool
	timeout  time.Duration
	ordering string

	size, num   int
	ticker      time.Duration
	chanSize    int
	maxInFlight int

	backoff, maxBackoff time.Duration
	jitter              float64
	maxAttempts         int

	deadLetterTopic string
	data            string

	kafka kafkaFlags
	admin adminOpts

	progress      string
	progressEvery time.Duration
	logLevel      string

	fs *pflag.FlagSet // the flags, for the errors to say where a value came from
}

const consumeLong = `Consume Kafka topics with ordered parallelism and hand each batch to an HTTP
endpoint (--http URL) or a command (--exec CMD), never two batches of one key
at once and always in offset order; offsets are committed only behind
finished records.

--http URL: each batch is POSTed as a JSON array (with --size 1: one record
per request, the raw value as the body and its coordinates in Kafka-*
headers). 2xx: done (a JSON body {"items":[...]} may name per-item outcomes);
429 and 503 pause every request to the endpoint for Retry-After, spending no
attempts; other 5xx, timeouts and refused connections are retried with
backoff (many failing lanes at once: the group backs off as a whole);
401, 403, 404 and 407 (and 3xx) are endpoint errors: retried with backoff,
counted, logged, never dead-lettered; other 4xx rejects the call: a call
of one record dead-letters it (reason rejected); a batch of more is called
again at once on halves, spending no attempt, until the rejected records
stand alone, and only they are dead-lettered.

--exec CMD: CMD runs under /bin/sh -c once per batch, the records on stdin
as JSON lines. Exit 0: done (stdout may name per-item outcomes, one JSON
object a line); 75 (EX_TEMPFAIL): retried with backoff; 126 or 127 (not
executable, not found): a command error, retried like an endpoint error;
any other exit rejects the call, as another 4xx does. Past --timeout, and if
consume dies (even by kill -9), the command's process group is killed.

Dead letters go to --dead-letter-topic, or the local store under --data
(read them with 'orderly dlq'); with neither, a rejected record is logged,
counted and skipped.

Progress: a live line on a terminal, else a line every --progress-every
(1m), and a final line of counts at exit; --admin ADDR serves the status
page, /metrics, /stats, /healthz and /readyz. SIGINT or SIGTERM: stop fetching, let the calls in flight
finish, commit, print the final line, exit 0.`

// The exit status of consume differs from the other commands': it has no
// planned end, so a signal is how it stops, and that is a success.
const consumeExitStatus = `Exit status: 0 stopped by SIGINT or SIGTERM, after draining and committing;
1 error (the run could not start or go on, or the coordinator did not
confirm a final commit at the stop); 2 usage error; 4 fenced: another
process joined with this --instance-id and held it for two session
timeouts (restarted, this one would take the ID back and fence the other
in turn; systemd: RestartPreventExitStatus=4).
`

// consumeCommand is `orderly consume`.
func consumeCommand(e env) *cobra.Command {
	o := &consumeOpts{}
	c := newCommand("consume", "forward Kafka records to an HTTP endpoint or a command, in order per key, many at a time",
		consumeLong, func(ctx context.Context) error { return runConsume(ctx, o, e) })
	withExitStatus(c, consumeExitStatus)
	fs := c.Flags()
	o.fs = fs
	listVar(fs, &o.brokers, "brokers", nil, false, dialAddr, "comma-separated host:port of the Kafka cluster (required)")
	listVar(fs, &o.topics, "topic", nil, false, kafkaName, "comma-separated topics to consume (required)")
	stringVar(fs, &o.group, "group", "", nil, "consumer group id (required)")
	listVar(fs, &o.strategies, "assignment-strategy", []string{sarama.CooperativeStickyBalanceStrategyName}, true, oneOf(group.BalanceStrategyNames()...),
		"the group's partition assignment strategies, most preferred first (Kafka's partition.assignment.strategy): cooperative-sticky, sticky, range, roundrobin. "+
			"To join a group whose members offer range: cooperative-sticky,range (the group then rebalances eagerly until every member offers cooperative-sticky alone)")
	stringVar(fs, &o.offsetReset, "offset-reset", "earliest", oneOf("earliest", "latest"),
		"where a partition with no committed offset starts, or one whose committed offset is out of range (Kafka's auto.offset.reset): earliest (the log start) or latest (records produced from then on)")
	durationVar(fs, &o.sessionTimeout, "session-timeout", 10*time.Second, 6*time.Second,
		"how long the coordinator waits for this member's heartbeats before it drops the member and rebalances (Kafka's session.timeout.ms; brokers allow 6s to 30m by default, and a value the brokers refuse ends consume); with --instance-id, how long a restarting instance keeps its partitions. Heartbeats go every third of it or every 3s, whichever is shorter")
	stringVar(fs, &o.instanceID, "instance-id", "", kafkaName,
		"a static member ID (Kafka's group.instance.id), the same across this instance's restarts, e.g. a pod name: a restart within --session-timeout takes its old member's place (without a rebalance with --assignment-strategy range; cooperative-sticky may still rebalance); an instance that stops for good keeps its partitions until then. Empty: a dynamic member")
	stringVar(fs, &o.httpURL, "http", "", nil, "POST records to this http:// or https:// URL")
	fs.StringArrayVar(&o.headers, "header", nil, `extra request header "Name: value" for --http (repeatable; the variable holds one)`)
	stringVar(fs, &o.httpCA, "http-ca", "", nil, "PEM file of CA certificates for an https --http endpoint, added to the system roots")
	stringVar(fs, &o.execCmd, "exec", "", nil, "run this command (/bin/sh -c) once per batch, the records on stdin as JSON lines")
	fs.BoolVar(&o.noCheck, "no-check", false, "do not check at start that the --http endpoint accepts connections")
	durationVar(fs, &o.timeout, "timeout", 30*time.Second, 1, "deadline of one request or command run; past it the call is cancelled (the command's process group killed) and retried. A stop or a revoke lets a call in flight run this long (and the rebalance timeout consume asks for is at least twice that)")
	stringVar(fs, &o.ordering, "ordering", "key", oneOf("key", "partition", "none"), "what stays in order: key (records with equal keys; a null or empty key is one key), partition, none")
	intVar(fs, &o.size, "size", 1, 1, group.MaxSize, "most records per request or command run; 1 with --http: the raw value as the body")
	intVar(fs, &o.num, "num", 32, 1, group.MaxNum, "requests or commands running at once (and HTTP connections kept alive)")
	durationVar(fs, &o.ticker, "ticker", 100*time.Millisecond, math.MinInt64, "how long a partial batch waits for more records; negative: never")
	intVar(fs, &o.chanSize, "chan", 1024, 1, group.MaxChan, "records each partition buffers ahead of dispatch (the group's Chan; sarama's ChannelBufferSize)")
	intVar(fs, &o.maxInFlight, "max-in-flight", 0, 0, group.MaxMaxInFlight, "records fetched and not yet finished; 0: the group's default (65536)")
	durationVar(fs, &o.backoff, "backoff", group.DefaultRetryBackoff, 0, "first retry's backoff, doubled each attempt")
	durationVar(fs, &o.maxBackoff, "max-backoff", group.DefaultMaxBackoff, 0, "longest backoff")
	floatVar(fs, &o.jitter, "jitter", group.DefaultJitter, fraction, "spread each backoff by up to this fraction either way, in [0, 1)")
	intVar(fs, &o.maxAttempts, "max-attempts", 0, 0, math.MaxInt32, "dead-letter a record after this many failed attempts (reason max_attempts); 0: retry forever. Needs --dead-letter-topic or --data")
	stringVar(fs, &o.deadLetterTopic, "dead-letter-topic", "", kafkaName, "produce dead letters to this topic (acks=all before the offset is committed)")
	stringVar(fs, &o.data, "data", "", nil, "directory for the group's files, one per instance: the committed offsets it saw, the local dead-letter store (when no --dead-letter-topic), parked records (--ordering none)")
	o.kafka.define(fs)
	o.admin.flags(fs)
	stringVar(fs, &o.progress, "progress", "auto", oneOf("auto", "on", "off"), "auto: a live line on a terminal, else a line every --progress-every; on: a line every --progress-every even on a terminal; off: only the final line")
	durationVar(fs, &o.progressEvery, "progress-every", time.Minute, time.Second, "interval of the progress line when it is not redrawn live")
	stringVar(fs, &o.logLevel, "log-level", "info", logLevel, "log level to stderr (debug, info, warn, error); empty: no logs")
	return c
}

// check is the usage check of the flags together.
func (o *consumeOpts) check() error {
	fs := o.fs
	switch {
	case o.httpURL != "" && o.execCmd != "":
		return usagef("give one of %s and %s, not both", flagArg(fs, "http"), flagArg(fs, "exec"))
	case o.httpURL == "" && o.execCmd == "":
		return usagef("nothing to forward to: give --http URL or --exec CMD")
	case len(o.brokers) == 0:
		return usagef("missing --brokers: give the Kafka cluster's host:port")
	case len(o.topics) == 0:
		return usagef("missing --topic: give the topics to consume")
	case o.group == "":
		return usagef("missing --group: give the consumer group id")
	case o.sessionTimeout > maxSessionTimeout:
		return badValue(flagSource(fs, "session-timeout"), o.sessionTimeout.String(), fmt.Errorf("above %v, Kafka's default group.max.session.timeout.ms", maxSessionTimeout))
	case o.maxBackoff < o.backoff:
		return usagef("%s is below %s", flagArg(fs, "max-backoff", o.maxBackoff), flagArg(fs, "backoff", o.backoff))
	case o.num*o.size > group.MaxBatchSlots:
		return batchSlotsError(fs, o.num, o.size)
	case o.deadLetterTopic != "" && slices.Contains(o.topics, o.deadLetterTopic):
		return usagef("%s is one of %s: consume would read its own dead letters",
			flagArg(fs, "dead-letter-topic", o.deadLetterTopic), flagArg(fs, "topic", strings.Join(o.topics, ",")))
	case o.maxAttempts > 0 && o.deadLetterTopic == "" && o.data == "":
		return usagef("%s needs a dead-letter destination: --dead-letter-topic or --data", flagArg(fs, "max-attempts", o.maxAttempts))
	case o.execCmd != "" && (len(o.headers) > 0 || o.httpCA != ""):
		return usagef("%s and %s apply to --http only", flagArg(fs, "header"), flagArg(fs, "http-ca"))
	}
	if o.httpURL != "" {
		if err := checkURL(o.httpURL); err != nil {
			return badValue(flagSource(fs, "http"), redactURL(o.httpURL), err)
		}
		for _, h := range o.headers {
			if _, _, err := parseHeader(h); err != nil {
				return usagef("invalid %s: %v", flagSource(fs, "header"), err) // not the value: it may be a credential
			}
		}
	}
	if strings.TrimSpace(o.execCmd) == "" && o.execCmd != "" {
		return badValue(flagSource(fs, "exec"), o.execCmd, errors.New("must not be blank"))
	}
	if err := o.admin.check(); err != nil {
		return err
	}
	return o.kafka.check()
}

// setRebalanceTimeout sets sc's rebalance timeout so that a stop or a
// revoke lets a call in flight run its whole --timeout. The drain is the
// group's default (group.DefaultDrainTimeout: 30s, or the call's --timeout
// and a second for its killed command to go, if that is longer, but at
// most half the rebalance timeout, which the drain must stay below or
// Kafka would evict the member): the rebalance timeout is raised in sc to
// twice that drain when it would bound it. The member's share of a
// rebalance may take that long, as Kafka's max.poll.interval.ms does for a
// Java consumer's processing. Under an eager strategy group.New raises
// Net.ReadTimeout past what the other members' drains can hold up a
// JoinGroup (see group.Config.Sarama).
func (o *consumeOpts) setRebalanceTimeout(sc *sarama.Config) {
	r := &sc.Consumer.Group.Rebalance
	unbound := group.DefaultDrainTimeout(math.MaxInt64, o.timeout) // the drain no rebalance timeout bounds
	r.Timeout = max(r.Timeout, 2*unbound)
}

// maxSessionTimeout is the longest --session-timeout: Kafka's default
// group.max.session.timeout.ms (a broker refuses a longer one at join).
const maxSessionTimeout = 30 * time.Minute

// kafkaName is the check of a name Kafka restricts the same way for
// topics and group instance ids: every flag that names a topic to create,
// consume or produce to (consume's --topic and --dead-letter-topic, the
// demo's --topic, broker --topics, the dlq commands' --topic and replay's
// --to), and --instance-id. A topic Kafka would refuse to create cannot
// exist, so a bad name is a usage error before anything connects. ""
// passes: a flag that must not be empty says so itself.
func kafkaName(s string) error {
	if !group.ValidInstanceID(s) {
		return errors.New(`use at most 249 letters, digits, '.', '_' and '-' (not "." or "..")`)
	}
	return nil
}

// balanceStrategies are the strategies --assignment-strategy names, in
// its order (the flag's check admits only group.BalanceStrategyNames).
func (o *consumeOpts) balanceStrategies() []sarama.BalanceStrategy {
	out := make([]sarama.BalanceStrategy, len(o.strategies))
	for i, name := range o.strategies {
		out[i], _ = group.NewBalanceStrategy(name)
	}
	return out
}

// checkURL accepts an absolute http or https URL with a host.
func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme == "" || u.Host == "" && u.Opaque != "":
		return errors.New("no scheme: give http://HOST/PATH or https://HOST/PATH")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q: must be http or https", u.Scheme)
	case u.Host == "":
		return errors.New("no host")
	}
	return nil
}

// parseHeader splits "Name: value".
func parseHeader(s string) (name, val string, err error) {
	name, val, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return "", "", errors.New(`must be "Name: value"`)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return !httpguts.IsTokenRune(r) }); i >= 0 {
		return "", "", fmt.Errorf("header name %q holds %q: a name is letters, digits and !#$%%&'*+-.^_`|~", name, []rune(name[i:])[0])
	}
	val = strings.TrimSpace(val)
	if i := strings.IndexFunc(val, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
		// The value is not shown: it may be a credential.
		return "", "", fmt.Errorf("the value of header %s holds a control character (byte %d)", name, i)
	}
	return name, val, nil
}

func (o *consumeOpts) orderingValue() group.Ordering {
	switch o.ordering {
	case "partition":
		return group.OrderPartition
	case "none":
		return group.Unordered
	}
	return group.OrderLanes
}

// runConsume is `orderly consume`: it runs until ctx ends (SIGINT,
// SIGTERM), then drains, commits and prints the final line.
func runConsume(ctx context.Context, o *consumeOpts, e env) (err error) {
	if err := o.check(); err != nil {
		return err
	}
	if err := o.checkData(); err != nil {
		return err
	}
	log := o.logger(e.stderr)
	defer log.Sync() //nolint:errcheck // best effort at exit
	sc := group.DefaultSarama()
	sc.ClientID = "orderly-consume"
	if err := o.kafka.apply(sc); err != nil {
		return err
	}
	sc.Consumer.Group.Rebalance.GroupStrategies = o.balanceStrategies()
	if o.offsetReset == "latest" {
		sc.Consumer.Offsets.Initial = sarama.OffsetNewest
	}
	sc.Consumer.Group.Session.Timeout = o.sessionTimeout
	sc.Consumer.Group.Heartbeat.Interval = min(3*time.Second, o.sessionTimeout/3)
	o.setRebalanceTimeout(sc)
	ctr := &sinkCounters{}
	var (
		gt  = &gate{}
		snk sink
		// The sinks' entries carry group, as every entry of the group's
		// own does (the README's Logs).
		sinkLog = log.With(zap.String("group", o.group))
	)
	if o.httpURL != "" {
		hs, err := newHTTPSink(o, gt, ctr, sinkLog)
		if err != nil {
			return err
		}
		if !o.noCheck {
			if err := hs.probe(ctx, min(o.timeout, 10*time.Second), flagArg(o.fs, "http", hs.shown)); err != nil {
				return err
			}
		}
		snk = hs
	} else {
		snk = newExecSink(o, gt, ctr, sinkLog)
	}
	defer snk.close()

	finals := &finalCommits{stopping: ctx}
	g, err := group.New(group.Config{
		Brokers:         o.brokers,
		Topics:          o.topics,
		GroupID:         o.group,
		Sarama:          sc,
		Size:            o.size,
		Num:             o.num,
		Ticker:          o.ticker,
		Chan:            max(o.chanSize, o.size),
		MaxInFlight:     o.maxInFlight,
		MsgTimeout:      o.timeout,
		Ordering:        o.orderingValue(),
		Retry:           group.Retry{Backoff: o.backoff, MaxBackoff: o.maxBackoff, Jitter: jitterValue(o.jitter), MaxAttempts: o.maxAttempts},
		InstanceID:      o.instanceID,
		DataPath:        o.data,
		DeadLetterTopic: o.deadLetterTopic,
		OnLost:          finals.onLost,
		Logger:          log,
	}, group.Handler[*group.Message]{Do: snk.send})
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	gt.pause, gt.resume = g.Pause, g.Resume
	defer gt.stop()
	srv, err := o.admin.start(g, e.stdout)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()

	start := time.Now()
	fmt.Fprintf(e.stdout, "orderly consume: %s -> %s; group %s, %s\n",
		strings.Join(o.topics, ","), snk.describe(), o.group, o.describe())
	if o.deadLetterTopic == "" && o.data == "" {
		fmt.Fprintln(e.stdout, "no dead-letter destination (--dead-letter-topic, --data): a rejected record is logged, counted and skipped")
	}
	prog := startConsumeProgress(o.progress, o.progressEvery, e.stdout, start, g.Stats, ctr, gt)
	runErr := g.Run(ctx)
	prog.close()
	if st := g.Stats(); runErr == nil || st.Claims > 0 {
		// A run that failed before it claimed anything (a topic missing,
		// no broker) has only zeros to count: its error says it all.
		fmt.Fprintln(e.stdout, finalLine(ctx, start, st, ctr, gt))
	}
	if runErr != nil {
		return o.explain(runErr)
	}
	return finals.err()
}

// jitterValue maps --jitter to group.Retry.Jitter, where 0 means the
// default and a negative value none.
func jitterValue(j float64) float64 {
	if j == 0 {
		return -1
	}
	return j
}

// describe is the start line's account of the settings.
func (o *consumeOpts) describe() string {
	s := fmt.Sprintf("ordering %s, size %d, num %d, ticker %v, timeout %v, backoff %v to %v", o.ordering, o.size, o.num, o.ticker, o.timeout, o.backoff, o.maxBackoff)
	if o.maxAttempts > 0 {
		s += fmt.Sprintf(", max attempts %d", o.maxAttempts)
	}
	if o.instanceID != "" {
		s += fmt.Sprintf(", static member %s (session timeout %v)", o.instanceID, o.sessionTimeout)
	}
	if o.offsetReset != "earliest" {
		s += ", offset reset " + o.offsetReset
	}
	if !slices.Equal(o.strategies, []string{sarama.CooperativeStickyBalanceStrategyName}) {
		s += ", assignment " + strings.Join(o.strategies, ",")
	}
	switch {
	case o.deadLetterTopic != "":
		s += ", dead letters to topic " + o.deadLetterTopic
	case o.data != "":
		s += ", dead letters to " + o.data
	}
	return s
}

// explain names the flag behind an error Run ended with (and its
// variable, when the value came from it).
func (o *consumeOpts) explain(err error) error {
	fs, topics := o.fs, strings.Join(o.topics, ",")
	var held *flock.HeldError
	var unknown *group.UnknownTopicError
	switch {
	case o.data != "" && errors.As(err, &held):
		return o.dataInUse(err, held)
	case errors.As(err, &unknown) && unknown.DeadLetter:
		return &restatedError{err: err,
			msg: flagArg(fs, "dead-letter-topic", o.deadLetterTopic) + ": the topic does not exist (consume does not create it)"}
	case errors.As(err, &unknown):
		return &restatedError{err: err, msg: flagArg(fs, "topic", topics) + ": " + missingTopics(unknown.Topics, len(o.topics))}
	case errors.Is(err, group.ErrUnknownTopic): // a topic gone while consuming
		return fmt.Errorf("%s: %w", flagArg(fs, "topic", topics), err)
	case errors.Is(err, group.ErrConnect):
		return o.kafka.brokersError(o.brokers, err)
	case errors.Is(err, group.ErrAuth):
		return fmt.Errorf("%s (%s): %w", flagArg(fs, "sasl-user", strconv.Quote(o.kafka.saslUser)), flagArg(fs, "sasl-mechanism", o.kafka.saslMechanism), err)
	case errors.Is(err, group.ErrNotAuthorized):
		return fmt.Errorf("%s, %s: %w", flagArg(fs, "group", o.group), flagArg(fs, "topic", topics), err)
	case errors.Is(err, group.ErrSessionTimeout):
		return fmt.Errorf("%s: %w", flagArg(fs, "session-timeout", o.sessionTimeout), err)
	case errors.Is(err, group.ErrInstanceFenced):
		return fmt.Errorf("%s: %w", flagArg(fs, "instance-id", o.instanceID), err)
	}
	return fmt.Errorf("consume: %w", err)
}

// checkData checks, before anything starts, that consume can use --data:
// the group keeps its committed-offsets record there, and its local
// dead-letter store and parked messages when it has them, and would find
// out only as it starts, after its first log entries, with an error that
// names the path but not the flag. It creates nothing: a --data that does
// not exist yet is checked at its nearest existing parent (a directory
// it can create files in; the group makes --data when it first writes
// there), so that a run that fails before it starts leaves none behind.
// Writing is checked by creating a file and removing it.
func (o *consumeOpts) checkData() error {
	if o.data == "" {
		return nil
	}
	flag := flagArg(o.fs, "data", o.data)
	dir, err := existingDir(o.data)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	created, err := createIn(dir)
	switch {
	case err == nil:
		return nil
	case created:
		return fmt.Errorf("%s: %w", flag, err)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the probe's own name says nothing
	}
	if dir != o.data {
		return fmt.Errorf("%s: cannot create it in %s: %w", flag, dir, err)
	}
	return fmt.Errorf("%s: cannot write in it: %w", flag, err)
}

// existingDir is path when it is a directory, or else its nearest parent
// that exists, when that is a directory. A dangling symbolic link is no
// way to a directory: making it would fail.
func existingDir(path string) (string, error) {
	for dir := path; ; {
		fi, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			if target, lerr := os.Readlink(dir); lerr == nil {
				if dir == path {
					return "", fmt.Errorf("a symbolic link to %s, which does not exist", target)
				}
				return "", fmt.Errorf("%s is a symbolic link to %s, which does not exist", dir, target)
			}
		}
		switch {
		case err == nil && fi.IsDir():
			return dir, nil
		case err == nil && dir == path:
			return "", errors.New("not a directory")
		case err == nil:
			return "", fmt.Errorf("%s is not a directory", dir)
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", err
		}
		dir = parent
	}
}

// restatedError is an error Run ended with, said in a sentence of its
// own that names the flag behind it and its value once (a --topic or
// --dead-letter-topic that does not exist, a --data another consumer
// holds), where the flag followed by the wrapped errors would name the
// value again (a --data's path several times over). It wraps what it restates, so that errors.Is and errors.As
// still find the group's sentinels and the lock's *flock.HeldError.
type restatedError struct {
	msg string
	err error
}

func (e *restatedError) Error() string { return e.msg }
func (e *restatedError) Unwrap() error { return e.err }

// missingTopics says which of the n topics of --topic are missing, as
// group.UnknownTopicError's Topics names them (none: it could not tell).
func missingTopics(missing []string, n int) string {
	switch {
	case n == 1:
		return "the topic does not exist (consume does not create it)"
	case len(missing) == 0:
		return "at least one of these topics does not exist (consume does not create topics)"
	case len(missing) == 1:
		return missing[0] + " does not exist (consume does not create it)"
	}
	return strings.Join(missing, ", ") + " do not exist (consume does not create them)"
}

// dataInUse is the error of a --data another consumer holds. It names
// --data (and its variable), which store under it is held and that
// store's lock file relative to it, and the holder, once each: err, from
// group.Run, names the path again in its wrappers (group's, and
// deadletter's or localqueue's) and in the lock file's path.
func (o *consumeOpts) dataInUse(err error, held *flock.HeldError) error {
	lock := held.Path
	if rel, rerr := filepath.Rel(o.data, held.Path); rerr == nil && filepath.IsLocal(rel) {
		lock = rel
	}
	store := "a lock in it"
	switch {
	case errors.Is(err, localqueue.ErrLocked):
		store = "the lock of its parked messages"
	case filepath.Dir(held.Path) == storeDir(o.data):
		store = "the lock of its local dead-letter store"
	}
	return &restatedError{err: err, msg: fmt.Sprintf("%s: in use (another consumer on it?): %s holds %s, %s",
		flagArg(o.fs, "data", o.data), held.Holder(), store, lock)}
}

// logger logs at --log-level and up to w, or nothing.
func (o *consumeOpts) logger(w io.Writer) *zap.Logger {
	return (&demoOpts{logLevel: o.logLevel}).logger(w)
}

// redactURL is u with a password in it replaced by "xxxxx" (url.URL's
// Redacted). A u that does not parse as a URL with a host (a "/" or a
// stray "%" in the password, no scheme) has everything from after its
// "//" (or from its start) to its last "@" cut to "xxxxx": it may hide
// more than the credentials, never less.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil && p.Opaque == "" && p.Host != "" {
		return p.Redacted()
	}
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return u
	}
	start := 0
	if i := strings.Index(u, "//"); i >= 0 && i < at {
		start = i + 2
	}
	return u[:start] + "xxxxx" + u[at:]
}
