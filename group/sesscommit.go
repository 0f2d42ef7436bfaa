package group

import (
	"sync"

	"github.com/IBM/sarama"
)

// sessionCommits coalesces the Commit calls of each session (coalesced).
// sarama's Commit sends every offset still dirty in its offset manager and
// clears them only when the answer comes, so concurrent calls would send
// the same request; at a shutdown every revoking claim commits at once.
// A caller waits for a Commit that began after it called (so it carries
// what the caller marked before): at most the one under way and its own.
type sessionCommits struct {
	mu sync.Mutex
	by map[sarama.ConsumerGroupSession]*sessionRound
}

// sessionRound is the coalesced Commit of one session and how many callers
// are in it (the entry goes when none is).
type sessionRound struct {
	c     coalesced[struct{}]
	users int
}

func newSessionCommits() *sessionCommits {
	return &sessionCommits{by: make(map[sarama.ConsumerGroupSession]*sessionRound)}
}

// commit returns once a Commit of sess that began after the call has
// returned: one this caller ran, or one another caller ran meanwhile.
func (s *sessionCommits) commit(sess sarama.ConsumerGroupSession) {
	s.mu.Lock()
	r := s.by[sess]
	if r == nil {
		r = &sessionRound{}
		s.by[sess] = r
	}
	r.users++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if r.users--; r.users == 0 {
			delete(s.by, sess)
		}
		s.mu.Unlock()
	}()
	r.c.do(struct{}{}, func([]struct{}) { sess.Commit() })
}
