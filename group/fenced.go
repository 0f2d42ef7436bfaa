package group

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
)

// A static member refused with FENCED_INSTANCE_ID stays refused: sarama
// joins again with the member ID the coordinator replaced, and only an
// UNKNOWN_MEMBER_ID (the InstanceID held by no one any more) makes it
// start afresh. Run asks the coordinator who holds the InstanceID, and
// ends with ErrInstanceFenced once the same other member has held it for
// two session timeouts: a live process heartbeats that long, while a
// member that is gone (stopped without a LeaveGroup, as static members
// do, or a dead member ID a coordinator that moved loaded again,
// KAFKA-10284) expires within one, and this member then takes the ID
// back at its next join.

// instanceFence is the Run loop's record of who fenced this member.
type instanceFence struct {
	holder string    // member ID of the other member that holds the InstanceID; "" none seen
	since  time.Time // when holder was first seen
}

// checkFence is called at each join refused with FENCED_INSTANCE_ID. It
// asks the coordinator (instanceHolder), updates f, and returns the error
// Run ends with once another member has held the InstanceID for twice
// Session.Timeout; until then, or when the coordinator cannot say, nil,
// and Run joins again after its backoff. The question runs beside the Run
// loop (sarama's requests take no ctx: one the coordinator does not
// answer waits up to Net.ReadTimeout), so that ctx ending lets Run stop
// at once; the question is waited for with the other side fetches, after
// the client closes.
func (g *Group[T]) checkFence(ctx context.Context, f *instanceFence, client sarama.Client, now time.Time) error {
	id := g.cfg.Sarama.Consumer.Group.InstanceId
	log := g.log.With(zap.String("instance", id))
	type answer struct {
		h   *sarama.GroupMemberDescription
		err error
	}
	asked := make(chan answer, 1)
	g.probes.Go(func() {
		h, err := g.instanceHolder(client)
		asked <- answer{h, err}
	})
	var a answer
	select {
	case a = <-asked:
	case <-ctx.Done():
		return nil
	}
	h, err := a.h, a.err
	switch {
	case err != nil:
		log.Warn("fenced: cannot tell which member holds this InstanceID; joining again", zap.Error(err))
		*f = instanceFence{}
		return nil
	case h == nil:
		log.Warn("fenced, but no other member holds this InstanceID now; joining again")
		*f = instanceFence{}
		return nil
	case h.MemberId != f.holder:
		*f = instanceFence{holder: h.MemberId, since: now}
		log.Warn("fenced: another member holds this InstanceID; unless it is gone by then, Run ends",
			zap.String("holder", h.MemberId), zap.String("client", h.ClientId), zap.String("host", h.ClientHost),
			zap.Duration("wait", fenceWait(g.cfg.Sarama)))
	}
	if now.Sub(f.since) < fenceWait(g.cfg.Sarama) {
		return nil
	}
	return fmt.Errorf("%w: %q is held by member %s (client %q at %s) since %s: two consumers run with one InstanceID, and this one stops",
		ErrInstanceFenced, id, h.MemberId, h.ClientId, h.ClientHost, f.since.Format(time.RFC3339))
}

// fenceWait is how long another member must hold this member's InstanceID
// before Run ends: two session timeouts.
func fenceWait(sc *sarama.Config) time.Duration { return 2 * sc.Consumer.Group.Session.Timeout }

// errNoInstanceIDs: the coordinator answered DescribeGroups below v4,
// whose members carry no InstanceID (brokers before 2.4).
var errNoInstanceIDs = errors.New("the coordinator's DescribeGroups (below v4, brokers before 2.4) does not say which member has which InstanceID")

// instanceHolder asks the group's coordinator (DescribeGroups) for the
// member other than this one that holds this member's InstanceID: nil
// when none does, an error when the coordinator cannot say.
func (g *Group[T]) instanceHolder(client sarama.Client) (*sarama.GroupMemberDescription, error) {
	if !g.cfg.Sarama.Version.IsAtLeast(sarama.V2_4_0_0) {
		return nil, errNoInstanceIDs // a v4 request could close the group's connection to an older broker
	}
	coord, err := client.Coordinator(g.cfg.GroupID)
	if err != nil {
		return nil, fmt.Errorf("finding the coordinator: %w", err)
	}
	req := &sarama.DescribeGroupsRequest{Version: 4, Groups: []string{g.cfg.GroupID}}
	resp, err := coord.DescribeGroups(req) // sarama lowers req.Version to what the broker supports
	if err != nil {
		return nil, fmt.Errorf("DescribeGroups: %w", err)
	}
	if req.Version < 4 {
		return nil, errNoInstanceIDs
	}
	id := g.cfg.Sarama.Consumer.Group.InstanceId
	var own string
	if p := g.memberID.Load(); p != nil {
		own = *p
	}
	for _, gd := range resp.Groups {
		if gd.GroupId != g.cfg.GroupID {
			continue
		}
		if gd.Err != sarama.ErrNoError {
			if errors.Is(gd.Err, sarama.ErrNotCoordinatorForConsumer) {
				_ = client.RefreshCoordinator(g.cfg.GroupID)
			}
			return nil, fmt.Errorf("DescribeGroups: %w", gd.Err)
		}
		for _, m := range gd.Members {
			if m.GroupInstanceId != nil && *m.GroupInstanceId == id && m.MemberId != own {
				return m, nil
			}
		}
		return nil, nil
	}
	return nil, fmt.Errorf("DescribeGroups: no answer for group %q", g.cfg.GroupID)
}
