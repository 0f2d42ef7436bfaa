package group

import (
	"sync"

	"github.com/IBM/sarama"
)

// sessionCommits coalesces the Commit calls of each session. sarama's
// Commit sends every offset still dirty in its offset manager and clears
// them only when the answer comes, so concurrent calls send the same
// request: at shutdown every revoking claim commits, and a member with
// hundreds of claims sent the same request several times within a
// millisecond. Here a caller waits for a commit that started after it
// called (so it carries what it marked before), and at most one runs per
// session: the claims that mark while one is under way share the next.
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
		n := r.started
		s.mu.Unlock()
		sess.Commit()
		s.mu.Lock()
		r.running, r.finished = false, n
		s.cond.Broadcast()
	}
	if r.users--; r.users == 0 {
		delete(s.by, sess)
	}
}
