package admin

import "github.com/orderly-go/orderly/group"

// Source is what the collector and the status page read: a *group.Group[T]
// of any T.
type Source interface {
	Stats() group.Stats
}

// Health is what /healthz and /readyz ask: a *group.Group[T] of any T.
// A Health that also has Readiness() (bool, string), as the group does,
// says why it is not ready: /readyz, /stats (ready_reason) and the status
// page show the reason.
type Health interface {
	// Ready reports whether the group joined (a standby member with no
	// partitions is ready too); false before the join, after a lost
	// session, while a join fails, and from the moment Run's ctx ends
	// (through the drain, and after Run returned).
	Ready() bool
	// Live reports whether the group is alive, and why not: no worker
	// stuck past MsgTimeout and its grace, the session not lost for
	// longer than Status.LostAfter. Lag does not count.
	Live() (bool, string)
}

// reasoner is a Health that also says why it is not ready
// (*group.Group's Readiness).
type reasoner interface {
	Readiness() (bool, string)
}

// readiness is h's Ready, with its reason when h says why.
func readiness(h Health) (bool, string) {
	if r, ok := h.(reasoner); ok {
		return r.Readiness()
	}
	return h.Ready(), ""
}

// Group is a Source with its Health: what Handler and Serve need.
type Group interface {
	Source
	Health
}
