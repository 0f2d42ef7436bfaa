package group

import (
	"fmt"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
)

// fencedBy asks the coordinator who holds the InstanceID this member was
// fenced for (FENCED_INSTANCE_ID: sarama joins again with the member ID
// the coordinator has replaced, and is refused at every join). It returns
// the error Run ends with (ErrFenced) when a member other than this one
// holds it, and nil when it cannot tell: the coordinator does not answer,
// brokers before 2.4 (DescribeGroups v4) do not say which member has which
// InstanceID, or no other member holds it any more (it left or timed
// out). Run then joins again, as for any rebalance error.
func (g *Group[T]) fencedBy(client sarama.Client) error {
	sc := g.cfg.Sarama
	id := sc.Consumer.Group.InstanceId
	log := g.log.With(zap.String("instance", id))
	if !sc.Version.IsAtLeast(sarama.V2_4_0_0) {
		log.Warn("fenced: another member may hold this InstanceID; brokers before 2.4 do not say which, so this member keeps joining")
		return nil
	}
	coord, err := client.Coordinator(g.cfg.GroupID)
	if err != nil {
		log.Warn("fenced: cannot ask the coordinator who holds this InstanceID; joining again", zap.Error(err))
		return nil
	}
	resp, err := coord.DescribeGroups(&sarama.DescribeGroupsRequest{Version: 4, Groups: []string{g.cfg.GroupID}})
	if err != nil {
		log.Warn("fenced: cannot ask the coordinator who holds this InstanceID; joining again", zap.Error(err))
		return nil
	}
	var own string
	if p := g.memberID.Load(); p != nil {
		own = *p
	}
	for _, gd := range resp.Groups {
		if gd.GroupId != g.cfg.GroupID || gd.Err != sarama.ErrNoError {
			continue
		}
		for _, m := range gd.Members {
			if m.GroupInstanceId != nil && *m.GroupInstanceId == id && m.MemberId != own {
				return fmt.Errorf("%w: %q is held by member %s (client %q at %s): two consumers run with one InstanceID, and this one stops",
					ErrFenced, id, m.MemberId, m.ClientId, m.ClientHost)
			}
		}
	}
	log.Warn("fenced, but no other member holds this InstanceID now; joining again", zap.String("member", own))
	return nil
}
