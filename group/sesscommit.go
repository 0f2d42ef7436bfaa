package group

import (
	"sync"

	"github.com/IBM/sarama"
)

// sessionCommits coalesces the Commit calls of each session. sarama's
// Commit sends every offset still dirty in its offset manager and clears
// them only when the answer comes, so concurrent calls would send the same
// request; at a shutdown every revoking claim commits at once. Here at
// most one Commit runs per session, and a caller waits for one that
// started after it called (so it carries what the caller marked before):
// the one under way, if any, and the next, which the claims that marked
// meanwhile share. A caller thus waits for at most two Commit calls.
type sessionCommits struct {
	mu   sync.Mutex
	cond *sync.Cond
	by   map[sarama.ConsumerGroupSession]*commitRound
}

// commitRound is the commit state of one session.
type commitRound struct {
	started, finished uint64 // commits begun and ended, numbered from 1
	running           bool
	users             int // callers inside commit (the entry goes when 0)
}

func newSessionCommits() *sessionCommits {
	s := &sessionCommits{by: make(map[sarama.ConsumerGroupSession]*commitRound)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// commit returns once a Commit of sess that began after the call has
// returned: one this caller ran, or one another caller ran meanwhile.
func (s *sessionCommits) commit(sess sarama.ConsumerGroupSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.by[sess]
	if r == nil {
		r = &commitRound{}
		s.by[sess] = r
	}
	r.users++
	need := r.started + 1
	for r.finished < need {
		if r.running {
			s.cond.Wait()
			continue
		}
		r.running = true
		r.started++
		s.run(r, sess)
	}
	if r.users--; r.users == 0 {
		delete(s.by, sess)
	}
}

// run calls sess.Commit for round r without the lock, and records it done
// even if Commit panics, so that the callers waiting go on.
func (s *sessionCommits) run(r *commitRound, sess sarama.ConsumerGroupSession) {
	n := r.started
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		r.running, r.finished = false, n
		s.cond.Broadcast()
	}()
	sess.Commit()
}
