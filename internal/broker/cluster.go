package broker

import "github.com/twmb/franz-go/pkg/kfake"

// Cluster is the kfake cluster behind b, for tests that inject faults
// (Cluster.Fault, ControlKey), move partition leaders and coordinators
// (MoveTopicPartition, RehashCoordinators) or read a group's state
// (GroupInfo: members, generation, assignments).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }
