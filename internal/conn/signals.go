package conn

import (
	"sync"
	"sync/atomic"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// signals are what the supervisor's watch (watch.go) is told from other goroutines: a re-list
// is asked for, the session was seen gone, and which lists the server announced changed. What
// is raised while no watch runs (during a connect) waits for the next one.
type signals struct {
	mu        sync.Mutex
	raised    chores        // relistChore, deadChore: raised and not yet taken
	wake      func()        // the running watch's, nil while none runs
	announced atomic.Uint32 // Lists the server announced changed since the last re-list began
}

func newSignals() *signals { return &signals{} }

// Lists is a set of the lists a server announces changes of with list_changed.
type Lists uint32

const (
	ToolList Lists = 1 << iota
	PromptList
	ResourceList
)

// announce notes the server's list_changed of a list and asks for a re-list.
func (s *signals) announce(l Lists) {
	s.announced.Or(uint32(l))
	s.requestRelist()
}

// takeAnnounced is what the server announced since the last call.
func (s *signals) takeAnnounced() Lists { return Lists(s.announced.Swap(0)) }

// requestRelist asks the supervisor to list again.
func (s *signals) requestRelist() { s.raise(relistChore) }

// signalDead tells the supervisor the session is gone.
func (s *signals) signalDead() { s.raise(deadChore) }

func (s *signals) raise(c chores) {
	s.mu.Lock()
	s.raised |= c
	wake := s.wake
	s.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// clearDead drops a death signal left by a request on the previous session.
func (s *signals) clearDead() {
	s.mu.Lock()
	s.raised &^= deadChore
	s.mu.Unlock()
}

// take is what was raised since the last take.
func (s *signals) take() chores {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.raised
	s.raised = 0
	return r
}

// watch has wake called on every signal from now on (nil: on none).
func (s *signals) watch(wake func()) {
	s.mu.Lock()
	s.wake = wake
	s.mu.Unlock()
}

// counters are what a connection counts: its metric series (phase changes, connects,
// reconnects, waits), and, for tests, the work it does by itself.
type counters struct {
	metrics *metrics.Server
	relists atomic.Uint64 // re-lists done (list_changed coalescing)
	lists   atomic.Uint64 // listings decoded (a re-list whose pages did not change decodes nothing)
	probes  atomic.Uint64 // health probes sent
}
