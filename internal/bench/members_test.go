//go:build unix

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/flock"
	"github.com/orderly-go/orderly/internal/loadgen"
	"github.com/orderly-go/orderly/internal/proctest"
)

// The members benchmark behind docs/SCALING.md's "Members" section: 1, 2
// and 4 consumer processes in one consumer group against an `orderly
// broker` process, every process a real one talking the Kafka protocol
// over loopback. Each consumer process runs a group with Num workers,
// Size 1 and 1 ms of simulated I/O per message (time.Sleep, as Work
// does); the aggregate throughput of the group (first message handled by
// any process to the last handled by any) is compared with the sleep
// limit of that many processes: nominally processes x Num messages per
// ms, and as measured by the same number of processes each running Num
// plain goroutines that sleep 1 ms per message (no Kafka, no pipeline:
// the Limit contender, one per process). Sizes run in alternating rounds.
//
//	ORDERLY_BENCH=1 go test ./internal/bench -run TestMembers -v -timeout 60m
//
// ORDERLY_BENCH_ROUNDS (default 3), ORDERLY_BENCH_NUM (workers per
// process, default 16) and ORDERLY_BENCH_SECONDS (the nominal length of a
// run at the nominal limit, default 12) change the size;
// ORDERLY_BENCH_PROCS (default 1,2,4) the process counts.
//
// The records (100 B, keys drawn uniformly from 10k) go to the 16
// partitions round robin, so that every process holds the same number of
// messages whatever partitions it gets; ORDERLY_BENCH_HASHED=1 places them
// by key hash instead (sarama's hash partitioner), which with these keys
// puts 41k to 55k of 768k records in a partition, and the group's end is
// then the end of the process with the most.
//
// The consumers join the group paused (Group.Pause) while the topic is
// empty; the test waits until the broker sees every process holding
// partitions and together all of them, produces the data set (the
// consumers fetch their share of it meanwhile, handling nothing), and
// then resumes them all with SIGUSR1: the join, the rebalances and the
// producing are not timed, and the run starts with a backlog, as the
// in-process benchmarks do. Each run also reports the aggregate rate while
// every process was still busy (up to the first process's last message),
// which leaves out the tail where the processes with fewer messages have
// run dry.

const (
	membersPartitions = 16
	membersKeys       = 10_000
	membersTopic      = "members"
)

// memberResult is what a child process writes when it ends: what it
// handled, when (unix ns) its first and last message finished, and its
// completions per 100 ms bucket counted from Base (unix ns).
type memberResult struct {
	Handled int64   `json:"handled"`
	First   int64   `json:"first"`
	Last    int64   `json:"last"`
	Base    int64   `json:"base"`
	Buckets []int64 `json:"buckets"`
}

const (
	memberBucket  = 100 * time.Millisecond
	memberBuckets = 10 * 60 * 10 // ten minutes of 100 ms buckets
)

// memberCounter counts completions in one child.
type memberCounter struct {
	base    time.Time
	handled atomic.Int64
	first   atomic.Int64
	last    atomic.Int64
	buckets [memberBuckets]atomic.Int64
}

// newMemberCounter counts in buckets from base, which the parent gives
// every child of a run so that their buckets line up.
func newMemberCounter(base time.Time) *memberCounter { return &memberCounter{base: base} }

// done counts n messages finished now.
func (c *memberCounter) done(n int) {
	now := time.Now()
	ns := now.UnixNano()
	c.first.CompareAndSwap(0, ns)
	// last only moves forward: two workers may finish in either order.
	for {
		l := c.last.Load()
		if l >= ns || c.last.CompareAndSwap(l, ns) {
			break
		}
	}
	if b := int(now.Sub(c.base) / memberBucket); b < memberBuckets {
		c.buckets[b].Add(int64(n))
	}
	c.handled.Add(int64(n))
}

func (c *memberCounter) result() memberResult {
	r := memberResult{Handled: c.handled.Load(), First: c.first.Load(), Last: c.last.Load(), Base: c.base.UnixNano()}
	end := 0
	for i := range c.buckets {
		if c.buckets[i].Load() > 0 {
			end = i + 1
		}
	}
	for i := range end {
		r.Buckets = append(r.Buckets, c.buckets[i].Load())
	}
	return r
}

// TestMembersChild is one process of TestMembers: in mode "orderly" a
// consumer of the group until SIGTERM, in mode "limit" Num goroutines
// sleeping 1 ms per message for its share, from a start time the parent
// gives. Either writes a memberResult to $ORDERLY_MB_OUT when done.
func TestMembersChild(t *testing.T) {
	mode := os.Getenv("ORDERLY_MB_CHILD")
	if mode == "" {
		t.Skip("only run as a child process of TestMembers")
	}
	out := os.Getenv("ORDERLY_MB_OUT")
	num, err := strconv.Atoi(os.Getenv("ORDERLY_MB_NUM"))
	if err != nil || num <= 0 {
		t.Fatalf("ORDERLY_MB_NUM=%q", os.Getenv("ORDERLY_MB_NUM"))
	}
	base, err := strconv.ParseInt(os.Getenv("ORDERLY_MB_BASE"), 10, 64)
	if err != nil {
		t.Fatalf("ORDERLY_MB_BASE: %v", err)
	}
	c := newMemberCounter(time.Unix(0, base))
	switch mode {
	case "limit":
		share, err := strconv.Atoi(os.Getenv("ORDERLY_MB_SHARE"))
		if err != nil {
			t.Fatal(err)
		}
		start, err := strconv.ParseInt(os.Getenv("ORDERLY_MB_START"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(time.Unix(0, start)))
		var wg sync.WaitGroup
		for w := range num {
			n := share / num
			if w < share%num {
				n++
			}
			wg.Go(func() {
				for range n {
					time.Sleep(time.Millisecond)
					c.done(1)
				}
			})
		}
		wg.Wait()
	case "orderly":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		g, err := group.New(group.Config{
			Brokers: strings.Split(os.Getenv("ORDERLY_MB_BROKERS"), ","),
			Topics:  []string{os.Getenv("ORDERLY_MB_TOPIC")},
			GroupID: os.Getenv("ORDERLY_MB_GROUP"),
			Sarama:  SaramaConfig(DefaultChan),
			Num:     num, Size: 1, Ticker: -1, Chan: DefaultChan,
		}, group.Handler[*group.Message]{Do: func(_ context.Context, batch []*group.Message) error {
			time.Sleep(time.Duration(len(batch)) * time.Millisecond)
			c.done(len(batch))
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		// Paused until the parent's SIGUSR1: it joins, fetches its share of
		// the backlog while the data set is produced, and handles nothing
		// before every process has been told to go.
		g.Pause()
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			select {
			case <-usr1:
				g.Resume()
			case <-ctx.Done():
			}
		}()
		defer func() { <-resumed }()
		if err := g.Run(ctx); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("ORDERLY_MB_CHILD=%q", mode)
	}
	b, err := json.Marshal(c.result())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
}

// memberProc is a process TestMembers started.
type memberProc struct {
	*proctest.Proc
	out string // the child's result file
}

// startMember starts cmd and kills it (SIGKILL) at the test's cleanup
// unless it has ended by then.
func startMember(t *testing.T, cmd *exec.Cmd, out string) *memberProc {
	t.Helper()
	return &memberProc{Proc: proctest.Start(t, cmd), out: out}
}

// cpu is the process's user+system CPU time so far, from /proc/PID/stat
// (utime and stime, in USER_HZ ticks: 100 per second on Linux).
func (p *memberProc) cpu(t *testing.T) time.Duration {
	t.Helper()
	f, err := flock.StatFields(p.Cmd.Process.Pid)
	if err != nil || len(f) < 13 {
		t.Fatalf("CPU of pid %d: %v (stat fields %q)", p.Cmd.Process.Pid, err, f)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: fields %q", p.Cmd.Process.Pid, f)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// membersBroker runs `bin broker` on a free loopback port with the members
// topic, memory only, and returns it with its address.
func membersBroker(t *testing.T, bin string) (*memberProc, string) {
	t.Helper()
	p, addr := proctest.StartBroker(t, bin, "--addr", "127.0.0.1:0", "--topics", membersTopic,
		"--partitions", strconv.Itoa(membersPartitions))
	return &memberProc{Proc: p}, addr
}

// membersChild starts a TestMembersChild process (this test binary again).
func membersChild(t *testing.T, dir string, i int, env ...string) *memberProc {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("member-%d.json", i))
	cmd := exec.Command(os.Args[0], "-test.run=^TestMembersChild$")
	cmd.Env = append(append(os.Environ(), "ORDERLY_MB_OUT="+out), env...)
	logf, err := os.Create(out + ".log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	return startMember(t, cmd, out)
}

// read is the child's result, once it has ended.
func (p *memberProc) read(t *testing.T) memberResult {
	t.Helper()
	b, err := os.ReadFile(p.out)
	if err != nil {
		log, _ := os.ReadFile(p.out + ".log")
		t.Fatalf("child %s wrote no result (%v); its output:\n%s", p.out, err, log)
	}
	var r memberResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", p.out, err)
	}
	return r
}

// membersRun is one run's measurement.
type membersRun struct {
	handled  int64
	elapsed  time.Duration // first message finished to last, any process
	rate     float64       // handled / elapsed
	allBusy  float64       // the aggregate rate up to the first process's last message (100 ms buckets)
	each     []string      // per process: messages, and seconds from the run's first message to its own last
	produce  time.Duration // producing the data set (orderly runs, not timed)
	cpuChild time.Duration // the consumer processes, from the resume to every offset committed
	cpuBrk   time.Duration // the broker, over the same window
}

// aggregate combines the children's results.
func aggregate(rs []memberResult) membersRun {
	var m membersRun
	var first, last, firstDone int64
	for _, r := range rs {
		m.handled += r.Handled
		if r.First > 0 && (first == 0 || r.First < first) {
			first = r.First
		}
		last = max(last, r.Last)
		if firstDone == 0 || r.Last < firstDone {
			firstDone = r.Last
		}
	}
	m.elapsed = time.Duration(last - first)
	if m.elapsed > 0 {
		m.rate = float64(m.handled) / m.elapsed.Seconds()
	}
	for _, r := range rs {
		m.each = append(m.each, fmt.Sprintf("%d in %.2fs", r.Handled, time.Duration(r.Last-first).Seconds()))
	}
	// Every child has the same Base: the buckets ending by firstDone.
	if len(rs) > 0 && first > 0 {
		base := rs[0].Base
		end := int((firstDone - base) / int64(memberBucket)) // buckets 0..end-1 end by firstDone
		var n int64
		for _, r := range rs {
			for i := 0; i < min(end, len(r.Buckets)); i++ {
				n += r.Buckets[i]
			}
		}
		if span := time.Duration(base + int64(end)*int64(memberBucket) - first); span > 0 {
			m.allBusy = float64(n) / span.Seconds()
		}
	}
	return m
}

// runMembersOrderly runs procs consumer processes in one group against a
// fresh broker process and n messages produced once they all hold
// partitions: round robin over the partitions (each holds n/16), or by
// key hash when hashed.
func runMembersOrderly(t *testing.T, bin string, procs, num, n int, hashed bool) membersRun {
	t.Helper()
	brk, addr := membersBroker(t, bin)
	defer brk.Stop(syscall.SIGTERM)
	dir := t.TempDir()
	base := time.Now()
	kids := make([]*memberProc, procs)
	for i := range kids {
		kids[i] = membersChild(t, dir, i, "ORDERLY_MB_CHILD=orderly", "ORDERLY_MB_BROKERS="+addr,
			"ORDERLY_MB_TOPIC="+membersTopic, "ORDERLY_MB_GROUP=members", "ORDERLY_MB_NUM="+strconv.Itoa(num),
			"ORDERLY_MB_BASE="+strconv.FormatInt(base.UnixNano(), 10))
	}
	defer func() {
		for _, k := range kids {
			k.Stop(syscall.SIGKILL)
		}
	}()
	admin, err := sarama.NewClusterAdmin([]string{addr}, SaramaConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	waitAssigned(t, admin, "members", procs)

	cpu := func() (kids0 time.Duration, brk0 time.Duration) {
		for _, k := range kids {
			kids0 += k.cpu(t)
		}
		return kids0, brk.cpu(t)
	}
	keys := loadgen.NewUniform(membersKeys, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	err = loadgen.Produce(ctx, []string{addr}, membersTopic, n, func(i int) loadgen.Record {
		v := make([]byte, ValueSize)
		for j := range v {
			v[j] = byte('a' + (i+j)%26)
		}
		r := loadgen.Record{Key: keyBytes(keys.Next()), Value: v}
		if !hashed {
			r.Pinned, r.Partition = true, int32(i%membersPartitions)
		}
		return r
	})
	if err != nil {
		t.Fatal(err)
	}
	produced := time.Now()
	// Give the consumers a moment to fetch their shares (they would have
	// a backlog in any case), then go.
	time.Sleep(time.Second)
	kidsCPU0, brkCPU0 := cpu()
	for _, k := range kids {
		if err := k.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}

	for {
		resp, err := admin.ListConsumerGroupOffsets("members", nil)
		committed := int64(0)
		if err == nil {
			for _, b := range resp.Blocks[membersTopic] {
				if b.Err == sarama.ErrNoError && b.Offset > 0 {
					committed += b.Offset
				}
			}
		}
		if committed >= int64(n) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d processes: %d of %d committed (%v)", procs, committed, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	kidsCPU1, brkCPU1 := cpu()
	rs := make([]memberResult, procs)
	for i, k := range kids {
		k.Stop(syscall.SIGTERM)
		rs[i] = k.read(t)
	}
	m := aggregate(rs)
	if m.handled < int64(n) {
		t.Fatalf("%d processes handled %d of %d", procs, m.handled, n)
	}
	m.produce = produced.Sub(start)
	m.cpuChild, m.cpuBrk = kidsCPU1-kidsCPU0, brkCPU1-brkCPU0
	return m
}

// waitAssigned waits until the broker sees the group Stable with every
// consumer process as a member holding partitions, together each
// partition once, unchanged for a second: the broker's view of the
// whole group, stable, which no one member's OnAssigned can tell.
func waitAssigned(t *testing.T, admin sarama.ClusterAdmin, groupID string, procs int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	stableSince := time.Time{}
	last, seen := "", ""
	for time.Now().Before(deadline) {
		view, ok := "", false
		if ds, err := admin.DescribeConsumerGroups([]string{groupID}); err == nil && len(ds) == 1 {
			d := ds[0]
			var all []int32
			var each []string
			ok = d.State == "Stable" && len(d.Members) == procs
			for id, m := range d.Members {
				a, err := m.GetMemberAssignment()
				if err != nil || a == nil || len(a.Topics[membersTopic]) == 0 {
					ok = false
					continue
				}
				ps := slices.Sorted(slices.Values(a.Topics[membersTopic]))
				all = append(all, ps...)
				each = append(each, fmt.Sprint(id, ps))
			}
			slices.Sort(all)
			slices.Sort(each)
			ok = ok && len(all) == membersPartitions && len(slices.Compact(all)) == membersPartitions
			view = d.State + " " + strings.Join(each, " ")
		}
		seen = view
		switch {
		case !ok:
			last = ""
		case view != last:
			last, stableSince = view, time.Now()
		case time.Since(stableSince) >= time.Second:
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d processes did not settle on an assignment of %d partitions in a minute: last seen %s", procs, membersPartitions, seen)
}

// runMembersLimit runs the sleep limit in procs processes: each Num
// goroutines sleeping 1 ms per message on its share of n, all from one
// start time.
func runMembersLimit(t *testing.T, procs, num, n int) membersRun {
	t.Helper()
	dir := t.TempDir()
	base := time.Now()
	start := base.Add(1500 * time.Millisecond) // every process started and initialised
	kids := make([]*memberProc, procs)
	for i := range kids {
		share := n / procs
		if i < n%procs {
			share++
		}
		kids[i] = membersChild(t, dir, i, "ORDERLY_MB_CHILD=limit", "ORDERLY_MB_NUM="+strconv.Itoa(num),
			"ORDERLY_MB_SHARE="+strconv.Itoa(share), "ORDERLY_MB_START="+strconv.FormatInt(start.UnixNano(), 10),
			"ORDERLY_MB_BASE="+strconv.FormatInt(base.UnixNano(), 10))
	}
	rs := make([]memberResult, procs)
	var cpu time.Duration
	for i, k := range kids {
		<-k.Done()
		if ps := k.Cmd.ProcessState; ps != nil {
			cpu += ps.UserTime() + ps.SystemTime()
		}
		rs[i] = k.read(t)
	}
	m := aggregate(rs)
	if m.handled != int64(n) {
		t.Fatalf("limit in %d processes handled %d of %d", procs, m.handled, n)
	}
	m.cpuChild = cpu
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// TestMembers: see the top of this file.
func TestMembers(t *testing.T) {
	if os.Getenv("ORDERLY_BENCH") == "" {
		t.Skip("set ORDERLY_BENCH=1: several minutes")
	}
	rounds := envInt(t, "ORDERLY_BENCH_ROUNDS", 3)
	num := envInt(t, "ORDERLY_BENCH_NUM", 16)
	secs := envInt(t, "ORDERLY_BENCH_SECONDS", 12)
	hashed := os.Getenv("ORDERLY_BENCH_HASHED") != ""
	t.Logf("records placed by key hash: %v", hashed)
	bin := proctest.BuildOrderly(t)
	sizes := []int{1, 2, 4}
	if v := os.Getenv("ORDERLY_BENCH_PROCS"); v != "" { // e.g. "4": only that size
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				t.Fatalf("ORDERLY_BENCH_PROCS=%q", v)
			}
			sizes = append(sizes, n)
		}
	}
	type pair struct{ orderly, limit membersRun }
	got := map[int][]pair{}
	for r := range rounds {
		t.Logf("round %d: load average %s", r+1, loadavg())
		for i := range sizes {
			procs := sizes[(r+i)%len(sizes)]
			// secs at the nominal limit: procs x num messages per ms.
			n := procs * num * 1000 * secs
			var p pair
			if (r+i)%2 == 0 {
				p.orderly = runMembersOrderly(t, bin, procs, num, n, hashed)
				p.limit = runMembersLimit(t, procs, num, n)
			} else {
				p.limit = runMembersLimit(t, procs, num, n)
				p.orderly = runMembersOrderly(t, bin, procs, num, n, hashed)
			}
			nominal := float64(procs*num) * 1000
			o, l := p.orderly, p.limit
			t.Logf("round %d, %d processes, %d msgs: orderly %.2fs %s msg/s (%.3fx nominal, %.3fx measured limit; while all busy %s msg/s, %.3fx measured; per process %s), "+
				"produced in %.2fs (not timed), consumers' CPU %.2fs (%.2f µs/msg), broker %.2fs (%.2f µs/msg); limit %.2fs %s msg/s (%.3fx nominal, CPU %.2f µs/msg); load %s",
				r+1, procs, n, o.elapsed.Seconds(), FormatCount(o.rate), o.rate/nominal, o.rate/l.rate, FormatCount(o.allBusy), o.allBusy/l.rate,
				strings.Join(o.each, ", "), o.produce.Seconds(), o.cpuChild.Seconds(), us(o.cpuChild, n), o.cpuBrk.Seconds(), us(o.cpuBrk, n),
				l.elapsed.Seconds(), FormatCount(l.rate), l.rate/nominal, us(l.cpuChild, n), loadavg())
			got[procs] = append(got[procs], p)
		}
	}
	t.Logf("load average at the end %s", loadavg())
	// The summary: medians and [min–max] over the rounds.
	ms := func(xs []float64, f string) string {
		return fmt.Sprintf(f+" ["+f+"–"+f+"]", median(xs), slices.Min(xs), slices.Max(xs))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| processes | messages | seconds | aggregate msg/s | nominal limit | measured limit msg/s | vs nominal | vs measured | all busy, vs measured | consumers' CPU/msg | broker CPU/msg | limit's CPU/msg |\n")
	fmt.Fprintf(&b, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, procs := range sizes {
		n := procs * num * 1000 * secs
		nominal := float64(procs*num) * 1000
		var sec, rate, lim, vsNom, vsLim, busy, cpuC, cpuB, cpuL []float64
		for _, p := range got[procs] {
			sec = append(sec, p.orderly.elapsed.Seconds())
			rate = append(rate, p.orderly.rate)
			lim = append(lim, p.limit.rate)
			vsNom = append(vsNom, p.orderly.rate/nominal)
			vsLim = append(vsLim, p.orderly.rate/p.limit.rate)
			busy = append(busy, p.orderly.allBusy/p.limit.rate)
			cpuC = append(cpuC, us(p.orderly.cpuChild, n))
			cpuB = append(cpuB, us(p.orderly.cpuBrk, n))
			cpuL = append(cpuL, us(p.limit.cpuChild, n))
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %.0f | %s | %s | %s | %s | %s µs | %s µs | %s µs |\n", procs, n, ms(sec, "%.1f"), ms(rate, "%.0f"),
			nominal, ms(lim, "%.0f"), ms(vsNom, "%.2f"), ms(vsLim, "%.2f"), ms(busy, "%.2f"), ms(cpuC, "%.1f"), ms(cpuB, "%.1f"), ms(cpuL, "%.1f"))
	}
	t.Log(b.String())
}

// us is d per message in µs.
func us(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
