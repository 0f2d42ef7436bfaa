package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// errFinalUnconfirmed is wrapped by consume's error when the coordinator
// did not confirm the final commit of a partition it let go at shutdown.
var errFinalUnconfirmed = errors.New("the coordinator did not confirm the final commit")

// finalCommits notes the partitions whose final commit at shutdown the
// coordinator did not confirm (the group's OnLost once the run was told
// to stop): the commit was refused, or the read-back that confirms it
// failed (the brokers out of reach, say). A partition lost while the run
// goes on is the group's business (the next owner goes on from the last
// commit it holds, and the group logs it); one lost at the stop means the
// promise of a drained and committed stop was not kept, or cannot be said
// to have been.
type finalCommits struct {
	stopping context.Context // the run's ctx: done once SIGINT or SIGTERM came
	mu       sync.Mutex
	lost     []string // topic/partition
}

// onLost is the group's OnLost.
func (f *finalCommits) onLost(topic string, partitions []int32, _ int32) {
	if f.stopping.Err() == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range partitions {
		f.lost = append(f.lost, fmt.Sprintf("%s/%d", topic, p))
	}
}

// err is nil when every final commit at the stop was confirmed, else an
// error naming the partitions whose commit was not.
func (f *finalCommits) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lost) == 0 {
		return nil
	}
	lost := slices.Clone(f.lost)
	slices.Sort(lost)
	return fmt.Errorf("%w of %d partitions (%s): records handled after the last commit the coordinator holds will be handled again by the group; check the broker and `orderly group describe`",
		errFinalUnconfirmed, len(lost), strings.Join(lost, ", "))
}
