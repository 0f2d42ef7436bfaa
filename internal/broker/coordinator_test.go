package broker

// Characterization tests of the embedded broker's classic group coordinator
// (kfake's groups.go), driven with raw protocol requests over loopback.
// Each pins a way the pinned kfake differs from Kafka's coordinator that
// can wedge a group under SIGKILL churn (issue 11). They pass while the
// quirk is there; when a kfake upgrade fixes one, its test fails and says
// so: then update the README's "The embedded broker" section and delete
// the test (or turn it into a check of Kafka's behaviour).

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// member is one group member on its own connection: the coordinator sees
// a killed process as a closed connection.
type member struct {
	t    *testing.T
	conn net.Conn
	fmt  *kmsg.RequestFormatter
	corr int32
	id   string
	gen  int32
}

func dialMember(t *testing.T, b *Broker, name string) *member {
	t.Helper()
	conn, err := net.Dial("tcp", b.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &member{t: t, conn: conn, fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID(name))}
}

// send writes req (non-flexible versions only: the response header is the
// bare correlation ID).
func (m *member) send(req kmsg.Request) {
	m.t.Helper()
	m.corr++
	if _, err := m.conn.Write(m.fmt.AppendRequest(nil, req, m.corr)); err != nil {
		m.t.Fatal(err)
	}
}

// recv reads the answer to the last request sent, or returns nil if none
// comes within wait.
func (m *member) recv(req kmsg.Request, wait time.Duration) kmsg.Response {
	m.t.Helper()
	_ = m.conn.SetReadDeadline(time.Now().Add(wait))
	var size [4]byte
	if _, err := io.ReadFull(m.conn, size[:]); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil
		}
		m.t.Fatal(err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(m.conn, buf); err != nil {
		m.t.Fatal(err)
	}
	if corr := int32(binary.BigEndian.Uint32(buf)); corr != m.corr {
		m.t.Fatalf("correlation %d, want %d", corr, m.corr)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(buf[4:]); err != nil {
		m.t.Fatal(err)
	}
	return resp
}

func (m *member) do(req kmsg.Request) kmsg.Response {
	m.t.Helper()
	m.send(req)
	resp := m.recv(req, 5*time.Second)
	if resp == nil {
		m.t.Fatalf("%s: no answer within 5s", kmsg.NameForKey(req.Key()))
	}
	return resp
}

const quirkGroup = "g"

func joinReq(memberID string, session, rebalance time.Duration, meta byte) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(5)
	req.Group = quirkGroup
	req.MemberID = memberID
	req.SessionTimeoutMillis = int32(session.Milliseconds())
	req.RebalanceTimeoutMillis = int32(rebalance.Milliseconds())
	req.ProtocolType = "consumer"
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{meta}}}
	return req
}

// startJoin sends JoinGroup; a new member first gets MEMBER_ID_REQUIRED
// and its ID, then the join that parks in the barrier is sent. The answer
// is read with finishJoin.
func (m *member) startJoin(session, rebalance time.Duration, meta byte) *kmsg.JoinGroupRequest {
	m.t.Helper()
	if m.id == "" {
		resp := m.do(joinReq("", session, rebalance, meta)).(*kmsg.JoinGroupResponse)
		if resp.ErrorCode != kerr.MemberIDRequired.Code {
			m.t.Fatalf("first join: %v, want MEMBER_ID_REQUIRED", kerr.ErrorForCode(resp.ErrorCode))
		}
		m.id = resp.MemberID
	}
	req := joinReq(m.id, session, rebalance, meta)
	m.send(req)
	time.Sleep(20 * time.Millisecond) // let the broker park it before the caller goes on
	return req
}

// finishJoin reads the join's answer within wait; nil if there is none.
func (m *member) finishJoin(req *kmsg.JoinGroupRequest, wait time.Duration) *kmsg.JoinGroupResponse {
	m.t.Helper()
	r := m.recv(req, wait)
	if r == nil {
		return nil
	}
	resp := r.(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		m.t.Fatalf("join: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	m.gen = resp.Generation
	return resp
}

// sync sends SyncGroup; the leader passes every member's ID.
func (m *member) sync(all ...string) {
	m.t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.SetVersion(3)
	req.Group, req.MemberID, req.Generation = quirkGroup, m.id, m.gen
	for _, id := range all {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte{}})
	}
	if resp := m.do(req).(*kmsg.SyncGroupResponse); resp.ErrorCode != 0 {
		m.t.Fatalf("sync: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// heartbeat returns the heartbeat's error code.
func (m *member) heartbeat() int16 {
	m.t.Helper()
	req := kmsg.NewPtrHeartbeatRequest()
	req.SetVersion(3)
	req.Group, req.MemberID, req.Generation = quirkGroup, m.id, m.gen
	return m.do(req).(*kmsg.HeartbeatResponse).ErrorCode
}

// heartbeatEvery heartbeats on its own connection (as m) until stop is
// closed, so m's connection stays free for a parked JoinGroup.
func heartbeatEvery(t *testing.T, b *Broker, m *member, d time.Duration) (stop func()) {
	hb := dialMember(t, b, "hb")
	hb.id, hb.gen = m.id, m.gen
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(d):
				hb.heartbeat()
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// describe returns the group's state and member IDs.
func describe(t *testing.T, b *Broker) (string, map[string]bool) {
	t.Helper()
	m := dialMember(t, b, "admin")
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.SetVersion(4)
	req.Groups = []string{quirkGroup}
	resp := m.do(req).(*kmsg.DescribeGroupsResponse)
	ids := map[string]bool{}
	for _, gm := range resp.Groups[0].Members {
		ids[gm.MemberID] = true
	}
	m.conn.Close()
	return resp.Groups[0].State, ids
}

// quirkBroker is the embedded broker with a low minimum session timeout,
// so that the tests take seconds.
func quirkBroker(t *testing.T) *Broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &Broker{c: c}
}

// stableWithLeader makes a group whose only member is the returned leader,
// Stable.
func stableWithLeader(t *testing.T, b *Broker, session, rebalance time.Duration) *member {
	a := dialMember(t, b, "a")
	if a.finishJoin(a.startJoin(session, rebalance, 0), 5*time.Second) == nil {
		t.Fatal("a lone member's join was not answered")
	}
	a.sync(a.id)
	return a
}

// TestQuirkUndeliveredJoinLeavesGhost: a member killed while its JoinGroup
// is parked (the answer cannot be delivered) may be kept with no session
// timer (groups.go reply: updateHeartbeat only after a delivered answer),
// and once the leader's SyncGroup makes the group Stable the pending-sync
// timer is stopped too (completeLeaderSync → clearPendingSync). The dead
// member then stays in the group, holding whatever the leader assigned it,
// until some later rebalance. Kafka schedules every member's session expiry
// when the join completes, delivered or not (onCompleteJoin →
// completeAndScheduleNextHeartbeatExpiration), and its pending-sync expiry
// also runs in Stable (onExpirePendingSync).
//
// "May": clientReq.reply (client_conn.go) selects between the connection's
// buffered response channel and its done channel, and Go picks at random
// when both are ready, so an answer to a closed connection counts as
// delivered about half the time (and then the member does get a timer).
// The test tries up to 16 times: at one chance in two per attempt, 8
// attempts all missed it once in a CI run under load.
func TestQuirkUndeliveredJoinLeavesGhost(t *testing.T) {
	t.Parallel()
	const session, rebalance = time.Second, time.Second
	const attempts = 16
	for i := range attempts {
		if ghostStays(t, session, rebalance) {
			t.Logf("quirk present (attempt %d): %v after it was killed (session and rebalance timeouts %v, %v), the member is still listed in a Stable group", i+1, 2500*time.Millisecond, session, rebalance)
			return
		}
	}
	t.Errorf("in %d attempts kfake always removed a member killed with its JoinGroup parked: the ghost quirk is fixed; update the README and this test", attempts)
}

// ghostStays runs the scenario once on a fresh broker and reports whether
// the killed member is still listed well after its session timeout.
func ghostStays(t *testing.T, session, rebalance time.Duration) bool {
	b := quirkBroker(t)
	a := stableWithLeader(t, b, session, rebalance)

	ghost := dialMember(t, b, "ghost")
	ghost.startJoin(session, rebalance, 0) // parks: the group now prepares a rebalance
	ghost.conn.Close()                     // SIGKILL
	time.Sleep(100 * time.Millisecond)     // the broker sees the connection close

	if code := a.heartbeat(); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("leader's heartbeat: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(code))
	}
	if a.finishJoin(a.startJoin(session, rebalance, 0), 5*time.Second) == nil {
		t.Fatal("the leader's rejoin was not answered")
	}
	a.sync(a.id, ghost.id)
	stop := heartbeatEvery(t, b, a, session/4)
	defer stop()

	time.Sleep(session + rebalance/2) // Kafka: the ghost's session and its pending sync have expired
	state, ids := describe(t, b)
	return ids[ghost.id] && state == "Stable"
}

// TestQuirkRebalanceDeadlineRestartsOnJoin: every JoinGroup during
// PreparingRebalance restarts the rebalance deadline (groups.go rebalance:
// tRebalance is stopped and rearmed on each call), so a member that never
// rejoins holds the whole group in PreparingRebalance for as long as new
// members keep arriving less than one rebalance timeout apart, as they do
// when consumer processes are killed and restarted every few seconds.
// Kafka arms the DelayedJoin once, when the group enters
// PreparingRebalance (prepareRebalance); later joins only try to complete it.
func TestQuirkRebalanceDeadlineRestartsOnJoin(t *testing.T) {
	t.Parallel()
	b := quirkBroker(t)
	const session, rebalance = 20 * time.Second, 1200 * time.Millisecond
	a := stableWithLeader(t, b, session, rebalance)
	silent := dialMember(t, b, "silent") // joins, then never rejoins (alive, session 20s)
	silentJoin := silent.startJoin(session, rebalance, 0)
	if a.heartbeat() != kerr.RebalanceInProgress.Code {
		t.Fatal("no rebalance after a second member joined")
	}
	a.finishJoin(a.startJoin(session, rebalance, 0), 5*time.Second)
	silent.finishJoin(silentJoin, 5*time.Second)
	a.sync(a.id, silent.id)
	silent.sync()

	// The leader rejoins (metadata changed): the group waits for silent,
	// which never rejoins. Kafka gives up on it after one rebalance timeout.
	aJoin := a.startJoin(session, rebalance, 1)
	begin := time.Now()
	const every = rebalance / 4 // well inside the deadline, even on a loaded machine
	for i := range 12 {         // for 3 rebalance timeouts
		time.Sleep(every)
		dialMember(t, b, fmt.Sprint("n", i)).startJoin(session, rebalance, 0)
	}
	waited := time.Since(begin)
	if resp := a.finishJoin(aJoin, 10*time.Millisecond); resp != nil {
		t.Errorf("the rebalance completed despite joins arriving every %v (generation %d): the deadline no longer restarts on join; update the README and this test", every, resp.Generation)
		return
	}
	state, _ := describe(t, b)
	t.Logf("quirk present: %v (%.1f rebalance timeouts) after the leader rejoined, the group is still %s", waited.Round(time.Millisecond), float64(waited)/float64(rebalance), state)
	if resp := a.finishJoin(aJoin, 3*rebalance); resp == nil {
		t.Error("the rebalance did not complete one rebalance timeout after the joins stopped")
	}
}

// TestQuirkParkedJoinExpiresUnanswered: a live member waiting in JoinGroup
// sends no heartbeats (sarama, like Kafka's Java client, does not heartbeat
// during a join), and kfake's session timer keeps running meanwhile: when it
// fires, the member is removed and its parked JoinGroup is never answered
// (groups.go updateHeartbeat → updateMemberAndRebalance → removeMember, which
// drops waitingReply without a reply). The client waits for its read timeout
// (sarama: Net.ReadTimeout, 30s) before it rejoins, as a new member. Kafka
// counts a member awaiting join or sync as alive
// (MemberMetadata.hasSatisfiedHeartbeat), and when it does remove a member
// with a parked join it answers it with UNKNOWN_MEMBER_ID first
// (removeMemberAndUpdateGroup).
func TestQuirkParkedJoinExpiresUnanswered(t *testing.T) {
	t.Parallel()
	b := quirkBroker(t)
	const session, rebalance = 500 * time.Millisecond, 3 * time.Second
	a := stableWithLeader(t, b, session, rebalance)
	slow := dialMember(t, b, "slow") // alive and heartbeating, slow to rejoin (allowed: up to the rebalance timeout)
	slowJoin := slow.startJoin(session, rebalance, 0)
	a.heartbeat()
	a.finishJoin(a.startJoin(session, rebalance, 0), 5*time.Second)
	slow.finishJoin(slowJoin, 5*time.Second)
	a.sync(a.id, slow.id)
	slow.sync()
	stopSlow := heartbeatEvery(t, b, slow, session/5)
	defer stopSlow()

	aJoin := a.startJoin(session, rebalance, 1) // the leader rejoins and waits for slow
	if resp := a.finishJoin(aJoin, 2*session); resp != nil {
		t.Fatalf("the join completed early (generation %d): slow rejoined?", resp.Generation)
	}
	_, ids := describe(t, b)
	if ids[a.id] {
		t.Errorf("kfake kept a member parked in JoinGroup past its session timeout: the quirk is fixed; update the README and this test")
		return
	}
	// Past the rebalance deadline the group completes (or empties) without
	// it: its JoinGroup is still unanswered.
	if resp := a.finishJoin(aJoin, rebalance+time.Second); resp != nil {
		t.Errorf("the expired member's parked JoinGroup was answered (generation %d): update the README and this test", resp.Generation)
		return
	}
	state, _ := describe(t, b)
	t.Logf("quirk present: a live member parked in JoinGroup was removed after its %v session timeout; its JoinGroup was still unanswered %v later (group %s)", session, rebalance+time.Second+2*session, state)
}
