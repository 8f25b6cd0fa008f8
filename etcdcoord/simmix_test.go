package etcdcoord

import (
	"math/rand/v2"
	"time"
)

// simMix is one seed's mix of steps. Each seed weighs the kinds of step differently and leaves
// some out (swarm testing): a fault that needs many replies held back, or a watch held for long,
// or no release for a while, is then found in some seeds rather than diluted in all.
type simMix struct {
	weights [simActions]int
	total   int
	late    int // of 20 answers, how many hold their reply back
	hold    int // the longest a watch is held back, in steps
	shared  int // of 6 locks, how many are shared
	records int // how many of the records it locks: 1 to simKeys*simCFs; fewer contend more
	linger  time.Duration
	// calm: the seed injects no fault (no request fails or loses its reply, no reply is held
	// back, no watch is held back or breaks, the leader stays), so that its Txns' cycles live
	// through the quiet ticks of the clock the deadlock oracle judges them by
	calm bool
}

type simAction int

const (
	actLock simAction = iota
	actRelease
	actFence
	actEndFence
	actAnswer
	actLate
	actWatch
	actLeader
	actClock
	actTxn   // a Txn begins, locks its next record, or ends (simTxn in simsteps_test.go)
	actDrain // etcd answers everything and every watch catches up: calm seeds only
	simActions
)

// simBase is the mean weight of each kind of step; simOptional are those a seed may leave out.
var (
	simBase     = [simActions]int{16, 7, 7, 4, 28, 8, 15, 3, 14, 20, 0}
	simOptional = [simActions]bool{actRelease: true, actFence: true, actEndFence: true, actLate: true, actLeader: true, actTxn: true}
)

func newSimMix(r *rand.Rand) simMix {
	var m simMix
	for a, base := range simBase {
		w := base/2 + r.IntN(base+1)
		if simOptional[a] && r.IntN(4) == 0 {
			w = 0
		}
		m.weights[a] = w
		m.total += w
	}
	m.late = r.IntN(9)
	m.hold = 10 + r.IntN(80)
	m.shared = 1 + r.IntN(5)
	m.records = []int{1, 1, 2, simKeys * simCFs}[r.IntN(4)]
	m.linger = []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second}[r.IntN(3)]
	if m.calm = r.IntN(3) == 0; m.calm {
		m.total -= m.weights[actLate] + m.weights[actLeader]
		m.weights[actLate], m.weights[actLeader] = 0, 0
		m.weights[actDrain] = 6
		m.total += 6
		m.late = 0
	}
	return m
}

// pick chooses the kind of the next step.
func (m *simMix) pick(r *rand.Rand) simAction {
	x := r.IntN(m.total)
	for a, w := range m.weights {
		if x < w {
			return simAction(a)
		}
		x -= w
	}
	return actClock
}
