package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// describeRun runs `orderly group describe args` in-process; it returns
// stdout, the error line(s) as main prints them and the exit code.
func describeRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	out, errOut, err := runCmd2(context.Background(), append([]string{"group", "describe"}, args...)...)
	var rep bytes.Buffer
	code = report(&rep, err)
	return out, errOut + rep.String(), code
}

// describeJSON runs describe --json and decodes its output.
func describeJSON(t *testing.T, args ...string) groupView {
	t.Helper()
	out, stderr, code := describeRun(t, append(args, "--json")...)
	if code != exitOK {
		t.Fatalf("orderly group describe %q: exit %d\n%s", args, code, stderr)
	}
	var v groupView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("describe --json: %v\n%s", err, out)
	}
	return v
}

// TestGroupDescribe: a real group on kfake holds one message stuck in Do
// (offset 5) and one waiting for a retry an hour away (offset 20) on
// partition 0, and finishes everything else; `orderly group describe`
// shows the committed offset stuck at 5, the lag, the finished offsets
// above it (count and ranges), the waiting message with its attempt and
// not-before, and the member owning each partition while the group is
// Stable; after Run ends, the group is Empty and its commits stay.
func TestGroupDescribe(t *testing.T) {
	const topic, groupID, n = "ledger-in", "ledger", 60
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Partition 0: n records, each with a key of its own; partition 1:
	// 10 records, all handled.
	if err := loadgen.Produce(ctx, b.Addrs(), topic, n+10, func(i int) loadgen.Record {
		if i >= n {
			return loadgen.Record{Key: fmt.Appendf(nil, "p1-%d", i), Value: fmt.Appendf(nil, "m%d", i), Pinned: true, Partition: 1}
		}
		return loadgen.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "m%d", i), Pinned: true, Partition: 0}
	}); err != nil {
		t.Fatal(err)
	}
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	sc.ClientID = "describe-test"
	started := time.Now()
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{topic}, GroupID: groupID, Sarama: sc,
		Size: 1, Num: 4, DrainTimeout: 500 * time.Millisecond,
		Retry: group.Retry{Backoff: time.Hour, MaxBackoff: time.Hour, Jitter: -1},
	}, group.Handler[*group.Message]{Do: func(ctx context.Context, batch []*group.Message) error {
		var failed group.BatchError
		for i, m := range batch {
			switch {
			case m.Partition == 0 && m.Offset == 5:
				<-ctx.Done() // stuck until shutdown
				return ctx.Err()
			case m.Partition == 0 && m.Offset == 20:
				failed.Fail(i, errors.New("declined"))
			}
		}
		return failed.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- g.Run(runCtx) }()
	defer func() {
		stop()
		<-ran
	}()

	// Wait until the broker holds the commit that says it all.
	wantFinished := int64(n - 5 - 2)
	waitCtx, waitCancel := context.WithTimeout(ctx, 45*time.Second)
	defer waitCancel()
	for {
		c := b.Commits(groupID, topic)
		d, err := commit.DecodeMeta(c[0].Metadata)
		if c[0].Offset == 5 && err == nil && d.Count() == wantFinished && len(d.Waiting) == 1 && c[1].Offset == 10 {
			break
		}
		select {
		case <-waitCtx.Done():
			t.Fatalf("no commit of the stuck head with its metadata: commits %+v", c)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The assignment shows once the group is Stable; wait for it too.
	var v groupView
	for {
		v = describeJSON(t, "--brokers", b.Addrs()[0], "--group", groupID)
		if v.State == "Stable" && len(v.Parts) == 2 && v.Parts[0].Member != "" {
			break
		}
		select {
		case <-waitCtx.Done():
			t.Fatalf("group never shown Stable with an owner: %+v", v)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(v.Members) != 1 || v.Members[0].ClientID != "describe-test" || v.Parts[0].Member != v.Members[0].ID || v.Parts[1].Member != v.Members[0].ID {
		t.Errorf("members: got %+v, partitions owned by %q and %q; want the one member owning both", v.Members, v.Parts[0].Member, v.Parts[1].Member)
	}
	p0, p1 := v.Parts[0], v.Parts[1]
	if p0.Topic != topic || p0.Partition != 0 || *p0.Committed != 5 || p0.HighWatermark != n || *p0.Lag != n-5 || p0.Metadata != "orderly3" {
		t.Errorf("partition 0: got %s/%d committed %d hw %d lag %d metadata %q; want %s/0 committed 5 hw %d lag %d orderly3",
			p0.Topic, p0.Partition, *p0.Committed, p0.HighWatermark, *p0.Lag, p0.Metadata, topic, n, n-5)
	}
	wantRanges := []offsetRange{{6, 19}, {21, n - 1}}
	if p0.FinishedAbove != wantFinished || fmt.Sprint(p0.Finished) != fmt.Sprint(wantRanges) {
		t.Errorf("partition 0 finished above: got %d in %v, want %d in %v", p0.FinishedAbove, p0.Finished, wantFinished, wantRanges)
	}
	if len(p0.Waiting) != 1 || p0.Waiting[0].Offset != 20 || p0.Waiting[0].Attempt != 2 || p0.Waiting[0].NotBefore == nil ||
		p0.Waiting[0].NotBefore.Before(started.Add(time.Hour)) || p0.Waiting[0].NotBefore.After(time.Now().Add(time.Hour+time.Second)) ||
		p0.Waiting[0].FirstFailure == nil || p0.Waiting[0].FirstFailure.Before(started.Truncate(time.Millisecond)) || p0.Waiting[0].FirstFailure.After(time.Now()) {
		t.Errorf("partition 0 waiting: got %+v, want offset 20, attempt 2, not before about an hour from now, first failed since the member started", p0.Waiting)
	}
	if *p1.Committed != 10 || *p1.Lag != 0 || p1.FinishedAbove != 0 || len(p1.Waiting) != 0 {
		t.Errorf("partition 1: got %+v, want committed 10, no lag, nothing above", p1)
	}
	if v.Lag != n-5 || v.FinishedAbove != wantFinished || v.Waiting != 1 {
		t.Errorf("totals: got lag %d, finished above %d, waiting %d; want %d, %d, 1", v.Lag, v.FinishedAbove, v.Waiting, n-5, wantFinished)
	}

	// The text table says the same.
	out, stderr, code := describeRun(t, "--brokers", b.Addrs()[0], "--group", groupID, "--topic", topic)
	if code != exitOK {
		t.Fatalf("describe: exit %d\n%s", code, stderr)
	}
	t.Logf("orderly group describe:\n%s", out)
	for _, want := range []string{
		"group ledger: Stable, 1 member",
		fmt.Sprintf("lag %d, of which %d finished above the committed offsets", n-5, wantFinished),
		fmt.Sprintf("%s/0: %d in 2 ranges: 6-19, 21-%d", topic, wantFinished, n-1),
		fmt.Sprintf("%s/0 offset 20: attempt 2, not before ", topic),
		"), first failed " + deadletter.FormatTime(p0.Waiting[0].FirstFailure.Time),
		"(client describe-test, host ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe: no %q in\n%s", want, out)
		}
	}
	if row := tableRow(out, topic, "0"); strings.Join(row, " ") != fmt.Sprintf("%s 0 5 %d %d %d 1 orderly3 %s", topic, n, n-5, wantFinished, v.Members[0].ID) {
		t.Errorf("describe: partition 0's row is %q", row)
	}

	// Once Run has returned, the group is Empty and its commits stay.
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	ran <- nil // for the deferred stop
	v = describeJSON(t, "--brokers", b.Addrs()[0], "--group", groupID)
	if v.State != "Empty" || len(v.Members) != 0 || len(v.Parts) != 2 || *v.Parts[0].Committed != 5 || v.Parts[0].FinishedAbove != wantFinished ||
		len(v.Parts[0].Waiting) != 1 || v.Parts[0].Member != "" {
		t.Fatalf("after Run: got %+v, want Empty, no members, partition 0 still committed at 5 with its metadata", v)
	}
	// Once its not-before has passed, the waiting message is due, and
	// with no member nothing runs it: describe says so, not that its
	// retry may be running.
	var text strings.Builder
	notBefore := v.Parts[0].Waiting[0].NotBefore
	if err := writeGroupTextAt(&text, &v, notBefore.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s/0 offset 20: attempt 2, not before %s (due; no member holds the partition)", topic, notBefore); !strings.Contains(text.String(), want) {
		t.Errorf("describe of the Empty group a minute past the not-before: got\n%s\nwant a line %q", text.String(), want)
	}
}

// tableRow is the fields of the table row of topic and partition.
func tableRow(out, topic, part string) []string {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == topic && f[1] == part {
			return f
		}
	}
	return nil
}

// TestGroupDescribeErrors: usage mistakes are one line and the hint, exit
// 2; a group or topic the cluster does not have, and brokers that cannot
// be reached, one line naming it, exit 1.
func TestGroupDescribeErrors(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"orders"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := b.Addrs()[0]
	// A group that committed once and has no members: it exists (Empty).
	if err := b.ResetCommitted(context.Background(), "old", "orders", map[int32]int64{0: 0}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string // the first line, after "orderly: "
	}{
		{[]string{"group"}, exitUsage, "orderly group needs a command: describe"},
		{[]string{"group", "descrbe"}, exitUsage, `unknown command "descrbe" (did you mean "describe"?)`},
		{[]string{"group", "describe"}, exitUsage, "orderly group describe needs --brokers HOST:PORT (the Kafka cluster)"},
		{[]string{"group", "describe", "--brokers", addr}, exitUsage, "orderly group describe needs --group GROUP (the consumer group's id)"},
		{[]string{"group", "describe", "--brokers", "nohost", "--group", "g"}, exitUsage, `invalid value "nohost" for --brokers: must be host:port`},
		{[]string{"group", "describe", "--brokers", addr, "--group", ""}, exitUsage, `invalid value "" for --group: must not be empty`},
		{[]string{"group", "describe", "--brokers", addr, "--group", "g", "extra"}, exitUsage, `unexpected argument "extra" (orderly group describe takes only flags)`},
		{[]string{"group", "describe", "--brokers", addr, "--group", "nosuch"}, exitError,
			fmt.Sprintf(`consumer group "nosuch" on --brokers %s: no such consumer group (no members, no committed offsets)`, addr)},
		{[]string{"group", "describe", "--brokers", addr, "--group", "old", "--topic", "nosuch"}, exitError, "--topic nosuch: no such topic"},
		{[]string{"group", "describe", "--brokers", "127.0.0.1:1", "--group", "g"}, exitError, "connect to --brokers 127.0.0.1:1: "},
	}
	for _, tt := range tests {
		out, errOut, err := runCmd2(context.Background(), tt.args...)
		var rep bytes.Buffer
		code := report(&rep, err)
		lines := strings.Split(strings.TrimSuffix(rep.String(), "\n"), "\n")
		ok := code == tt.code && out == "" && errOut == "" && strings.HasPrefix(lines[0], "orderly: "+tt.want)
		if tt.code == exitUsage {
			ok = ok && len(lines) == 2 && strings.HasPrefix(lines[1], "see 'orderly group")
		} else {
			ok = ok && len(lines) == 1
		}
		if !ok {
			t.Errorf("orderly %q: exit %d, stdout %q, stderr:\n%s%s\nwant exit %d and %q", tt.args, code, out, errOut, rep.String(), tt.code, tt.want)
		}
	}
	// The group that exists shows its commit, with no metadata.
	v := describeJSON(t, "--brokers", addr, "--group", "old")
	if v.State != "Empty" || len(v.Parts) != 1 || v.Parts[0].Committed == nil || *v.Parts[0].Committed != 0 || v.Parts[0].Metadata != "" {
		t.Errorf("group old: got %+v, want Empty, orders/0 committed at 0 without metadata", v)
	}
}

// TestDecodeMetaView: what describe makes of each kind of commit
// metadata.
func TestDecodeMetaView(t *testing.T) {
	nb := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	v2, _, _ := commit.EncodeWaitingMeta(100, []commit.Waiting{{Offset: 100, Attempt: 3, NotBefore: nb}, {Offset: 104, Attempt: 2}},
		[]commit.Range{{Start: 101, End: 104}, {Start: 107, End: 108}}, 4000)
	v3, _, _ := commit.EncodeWaitingMeta(100, []commit.Waiting{{Offset: 100, Attempt: 3, NotBefore: nb, FirstFailure: nb.Add(-time.Hour)}, {Offset: 104, Attempt: 1, NotBefore: nb}},
		[]commit.Range{{Start: 101, End: 104}}, 4000)
	v1, _ := commit.EncodeMeta(100, []commit.Range{{Start: 102, End: 103}}, 4000)
	other, _ := commit.EncodeMeta(90, []commit.Range{{Start: 95, End: 96}}, 4000)
	past, _, _ := commit.EncodeWaitingMeta(100, []commit.Waiting{{Offset: 1 << 41, Attempt: 2}}, []commit.Range{{Start: 101, End: 1 << 40}}, 4000)
	tests := []struct {
		name, meta string
		want       string // Metadata
		finished   []offsetRange
		waiting    string
		hasErr     bool
	}{
		{"none", "", "", nil, "[]", false},
		{"version 3", v3, "orderly3", []offsetRange{{101, 103}}, "[100/3/2026-05-01T12:00:00Z/2026-05-01T11:00:00Z 104/1/2026-05-01T12:00:00Z/-]", false},
		{"version 2", v2, "orderly2", []offsetRange{{101, 103}, {107, 107}}, "[100/3/2026-05-01T12:00:00Z/- 104/2/-/-]", false},
		{"version 1", v1, "orderly", []offsetRange{{102, 102}}, "[]", false},
		{"someone else's", "checkpoint 7", "foreign", nil, "[]", false},
		{"corrupt", commit.MetaPrefix2 + "!!", "corrupt", nil, "[]", true},
		{"for another offset", other, "stale", nil, "[]", true},
		{"past the high watermark", past, "orderly2", []offsetRange{{101, 109}}, "[]", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off := int64(100)
			pv := partitionView{Committed: &off, Finished: []offsetRange{}, Waiting: []waitingView{}}
			pv.decodeMeta(tt.meta, 110)
			var w []string
			for _, x := range pv.Waiting {
				nb, ff := "-", "-"
				if x.NotBefore != nil {
					nb = x.NotBefore.Format(time.RFC3339)
				}
				if x.FirstFailure != nil {
					ff = x.FirstFailure.Format(time.RFC3339)
				}
				w = append(w, fmt.Sprintf("%d/%d/%s/%s", x.Offset, x.Attempt, nb, ff))
			}
			var count int64
			for _, r := range tt.finished {
				count += r.To - r.From + 1
			}
			if pv.Metadata != tt.want || fmt.Sprint(pv.Finished) != fmt.Sprint(append([]offsetRange{}, tt.finished...)) ||
				pv.FinishedAbove != count || fmt.Sprint(w) != tt.waiting && !(tt.waiting == "[]" && w == nil) || (pv.MetadataError != "") != tt.hasErr {
				t.Errorf("got %q %v (%d) waiting %v error %q; want %q %v (%d) waiting %s, error: %v",
					pv.Metadata, pv.Finished, pv.FinishedAbove, w, pv.MetadataError, tt.want, tt.finished, count, tt.waiting, tt.hasErr)
			}
		})
	}
}

// TestGroupHelp: the group commands' help follows the convention.
func TestGroupHelp(t *testing.T) {
	for _, args := range [][]string{{"group", "--help"}, {"group", "describe", "--help"}, {"help", "group", "describe"}} {
		out, err := runCmd(context.Background(), args...)
		path := "orderly " + strings.Join(args[:len(args)-1], " ")
		if args[0] == "help" {
			path = "orderly group describe"
		}
		if err != nil || !strings.HasPrefix(out, "Usage: "+path+" [flags]") && !strings.HasPrefix(out, "Usage: "+path+" [command]") || !endsWithFooter(out, helpExitStatus) {
			t.Errorf("orderly %q: error %v, output:\n%s", args, err, out)
		}
	}
	out, _ := runCmd(context.Background(), "--help")
	if !strings.Contains(out, "\n  group ") {
		t.Errorf("orderly --help lists no group command:\n%s", out)
	}
}

// memberHandler is a sarama consumer group handler that reports its
// session's member id and claims and then holds them until released.
type memberHandler struct {
	setup   chan<- sarama.ConsumerGroupSession
	release <-chan struct{}
}

func (h memberHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.setup <- s
	return nil
}
func (memberHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h memberHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	select {
	case <-h.release:
	case <-s.Context().Done():
	}
	return nil
}

// TestGroupDescribeMembers: with two members of a plain sarama consumer
// group (range assignor) splitting 4 partitions, describe names each
// partition's owner and each member's assignment as the members' own
// sessions have them.
func TestGroupDescribeMembers(t *testing.T) {
	const topic, groupID = "shared", "pair"
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := make(chan struct{})
	setups := make(chan sarama.ConsumerGroupSession, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	for i := range 2 {
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V3_0_0_0
		cfg.ClientID = fmt.Sprintf("member-%d", i)
		cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
		cg, err := sarama.NewConsumerGroup(b.Addrs(), groupID, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cg.Close()
			for ctx.Err() == nil {
				if err := cg.Consume(ctx, []string{topic}, memberHandler{setup: setups, release: release}); err != nil {
					return
				}
			}
		}()
		defer cancel() // before wg.Wait: the members leave
	}
	// Sessions come and go as the second member joins; describe until it
	// agrees with the two latest sessions of one generation.
	latest := map[string]sarama.ConsumerGroupSession{} // by client id
	var v groupView
	for {
		select {
		case s := <-setups:
			latest[s.MemberID()[:len("member-0")]] = s
			continue
		case <-ctx.Done():
			t.Fatalf("describe never agreed with the members' sessions %v: %+v", latest, v)
		case <-time.After(100 * time.Millisecond):
		}
		if len(latest) != 2 || latest["member-0"].GenerationID() != latest["member-1"].GenerationID() {
			continue
		}
		v = describeJSON(t, "--brokers", b.Addrs()[0], "--group", groupID)
		if v.State == "Stable" && len(v.Members) == 2 && len(v.Parts) == 4 && v.Parts[0].Member != "" {
			break
		}
	}
	owners := map[int32]string{}
	for _, s := range latest {
		for _, p := range s.Claims()[topic] {
			owners[p] = s.MemberID()
		}
	}
	for _, p := range v.Parts {
		if p.Member != owners[p.Partition] || p.Committed != nil || p.Lag != nil {
			t.Errorf("%s/%d: owner %q, committed %v; want %q (its session's claim), no commit", p.Topic, p.Partition, p.Member, p.Committed, owners[p.Partition])
		}
	}
	for _, m := range v.Members {
		s, ok := latest[m.ClientID]
		if !ok || m.ID != s.MemberID() || fmt.Sprint(m.Assigned[topic]) != fmt.Sprint(slices.Sorted(slices.Values(s.Claims()[topic]))) {
			t.Errorf("member %s (client %s): assigned %v; want the session's %v", m.ID, m.ClientID, m.Assigned, s.Claims())
		}
	}
}

// TestDescribeDue: what describe says of a waiting message past its
// not-before depends on whether a member holds its partition, not on
// whether the group has members: a Stable group's member that holds
// another partition runs nothing of this one, and while the group
// rebalances the broker names no holder. The text said "may be running"
// whenever the group had a member.
func TestDescribeDue(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	m1 := []memberView{{ID: "m1", Assigned: map[string][]int32{"t": {1}}}}
	tests := []struct {
		name    string
		state   string
		members []memberView
		holder  string // of t/0
		want    string
	}{
		{"held", "Stable", m1, "m1", "due: its retry may be running"},
		{"held by no member of a Stable group", "Stable", m1, "", "due; no member holds the partition"},
		{"an Empty group", "Empty", nil, "", "due; no member holds the partition"},
		{"a member's assignment unread", "Stable", []memberView{{ID: "m1", unread: true}}, "",
			"due: its retry may be running (a member's assignment could not be read)"},
		{"preparing a rebalance", "PreparingRebalance", m1, "",
			"due; the group is rebalancing: under an eager protocol no member holds the partition until it ends, under a cooperative one its retry may be running"},
		{"completing a rebalance", "CompletingRebalance", m1, "",
			"due; the group is rebalancing: under an eager protocol no member holds the partition until it ends, under a cooperative one its retry may be running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &groupView{Group: "g", State: tt.state, Members: tt.members,
				Parts: []partitionView{{Topic: "t", Partition: 0, HighWatermark: 10, Member: tt.holder, Waiting: []waitingView{{Offset: 1, Attempt: 2}}}}}
			var b strings.Builder
			if err := writeGroupTextAt(&b, v, now); err != nil {
				t.Fatal(err)
			}
			if want := "  t/0 offset 1: attempt 2, " + tt.want + "\n"; !strings.Contains(b.String(), want) {
				t.Errorf("describe text: got\n%s\nwant a line %q", b.String(), want)
			}
		})
	}
}

// TestDescribeWaitingWhen: describe's text says when each waiting message
// may run again: not before a time to come (and in how long), or due, when
// its retry may be running already (the metadata lists it until it is
// done) or, with no member holding its partition, when nothing runs it; and when it
// first failed if the metadata says. Text and --json
// write each time with three digits of milliseconds, as the dead-letter
// headers do, also on a whole second and with trailing zeros.
func TestDescribeWaitingWhen(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	later, earlier := millisTime{now.Add(time.Hour)}, millisTime{now.Add(-time.Minute)}
	tenths := millisTime{time.Date(2026, 12, 5, 3, 51, 25, 280e6, time.UTC)}
	v := &groupView{Group: "g", State: "Stable", Members: []memberView{{ID: "m1", Assigned: map[string][]int32{"t": {0}}}},
		Parts: []partitionView{{Topic: "t", Partition: 0, HighWatermark: 10, Member: "m1",
			Waiting: []waitingView{{Offset: 1, Attempt: 2}, {Offset: 2, Attempt: 3, NotBefore: &earlier},
				{Offset: 3, Attempt: 2, NotBefore: &later, FirstFailure: &earlier}, {Offset: 4, Attempt: 2, NotBefore: &tenths, FirstFailure: &tenths}}}}}
	var b strings.Builder
	if err := writeGroupTextAt(&b, v, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"t/0 offset 1: attempt 2, due: its retry may be running",
		"t/0 offset 2: attempt 3, not before 2026-12-04T11:59:00.000Z (due: its retry may be running)",
		"t/0 offset 3: attempt 2, not before 2026-12-04T13:00:00.000Z (in 1h0m0s), first failed 2026-12-04T11:59:00.000Z",
		"t/0 offset 4: attempt 2, not before 2026-12-05T03:51:25.280Z (in 15h51m25s), first failed 2026-12-05T03:51:25.280Z",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe text: got\n%s\nwant a line %q", b.String(), want)
		}
	}

	// With no member (an Empty group), a due message's retry runs
	// nowhere.
	empty := *v
	empty.State, empty.Members = "Empty", nil
	empty.Parts = []partitionView{v.Parts[0]}
	empty.Parts[0].Member = ""
	b.Reset()
	if err := writeGroupTextAt(&b, &empty, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"t/0 offset 1: attempt 2, due; no member holds the partition\n",
		"t/0 offset 2: attempt 3, not before 2026-12-04T11:59:00.000Z (due; no member holds the partition)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe text of an Empty group: got\n%s\nwant a line %q", b.String(), want)
		}
	}

	b.Reset()
	if err := writeGroupJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Parts []struct {
			Waiting []struct {
				NotBefore    *string `json:"not_before"`
				FirstFailure *string `json:"first_failure"`
			} `json:"waiting"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(b.String()), &raw); err != nil || len(raw.Parts) != 1 {
		t.Fatalf("describe --json: %v\n%s", err, b.String())
	}
	var got []string
	for _, w := range raw.Parts[0].Waiting {
		for _, s := range []*string{w.NotBefore, w.FirstFailure} {
			if s == nil {
				got = append(got, "null")
			} else {
				got = append(got, *s)
			}
		}
	}
	want := []string{"null", "null", "2026-12-04T11:59:00.000Z", "null", "2026-12-04T13:00:00.000Z", "2026-12-04T11:59:00.000Z",
		"2026-12-05T03:51:25.280Z", "2026-12-05T03:51:25.280Z"}
	if !slices.Equal(got, want) {
		t.Errorf("describe --json not_before, first_failure: got %q, want %q", got, want)
	}

	// What --json writes, describe's own JSON reads back.
	var back groupView
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil || !back.Parts[0].Waiting[3].FirstFailure.Equal(tenths.Time) {
		t.Errorf("describe --json read back: %v, first failure %v, want %v", err, back.Parts[0].Waiting[3].FirstFailure, tenths)
	}
}

// TestDescribeLagWithoutCommits: the summary's lag covers the partitions
// with a committed offset and says how many have none; with none at all it
// says the lag is unknown. It read "lag 0" for a group that had committed
// nothing, every row showing "-" (the binary prober).
func TestDescribeLagWithoutCommits(t *testing.T) {
	off, lag := int64(4), int64(6)
	committed := partitionView{Topic: "t", Partition: 0, HighWatermark: 10, Committed: &off, Lag: &lag}
	none := partitionView{Topic: "t", Partition: 1, HighWatermark: 7}
	for _, tt := range []struct {
		name  string
		parts []partitionView
		lag   int64
		want  string
	}{
		{"none committed", []partitionView{none, none}, 0, "lag unknown: no partition has a committed offset (2 partitions)"},
		{"some committed", []partitionView{committed, none}, 6, "lag 6 over the 1 partition with a committed offset (1 without one, lag unknown), of which 0 finished"},
		{"all committed", []partitionView{committed}, 6, "lag 6, of which 0 finished"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeGroupTextAt(&b, &groupView{Group: "g", State: "Empty", Parts: tt.parts, Lag: tt.lag}, time.Now()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.want) {
				t.Errorf("got:\n%s\nwant it to say %q", b.String(), tt.want)
			}
		})
	}
}
