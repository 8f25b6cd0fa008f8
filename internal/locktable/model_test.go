package locktable

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model check: rapid drives a table through random sequences of lock, try, release, revoke,
// upgrade, cancel and clock steps (lapses and timeouts), shared and exclusive, by owners and by
// requests of no owner, on a few keys and on ranges over them. After every step the table is
// compared with the model, which keeps the rules of docs/DESIGN.md §15 in the plainest form: one
// list of holders and one queue in arrival order (upgrades ahead), and a request is served once no
// holder and no request ahead of it conflicts with it, decided by brute force over the whole state
// (model_rules_test.go). Where no range is involved the model also applies the rules of keys alone,
// per key a FIFO queue served from its head, and requires both to agree. The comparison covers who
// holds each key or range in which mode, the queues, and how every request that returned ended.
// The wait-for graph is then brute-forced from the whole state: no cycle may persist among waiting
// owners, and every DeadlockError must name a cycle that was real (model_check_test.go).
//
// Every request waits in a goroutine of its own; a step is over once each of them has returned or
// is queued with its deadlock check done. Leases and timeouts end a few nanoseconds apart, so
// that no two deadlines coincide and the clock steps exactly onto each.

// modelSteps and modelDeadlocks count the steps TestModel took and the deadlocks the table
// reported in them, for its log.
var modelSteps, modelDeadlocks atomic.Int64

// modelChecks and modelStepsEach are how many sequences (200, or 3,000 under -long), of up to how
// many steps, TestModel runs unless -rapid.checks or -rapid.steps say otherwise: more than
// rapid's defaults, whose short sequences seldom queue enough requests to close a cycle.
func modelChecks() string { return strconv.Itoa(stressCount(200, 3000)) }

const modelStepsEach = "100"

// useModelSize sets -rapid.checks and -rapid.steps to modelChecks and modelStepsEach for the rest
// of the test, unless the command line set them.
func useModelSize(t *testing.T) {
	for name, v := range map[string]string{"rapid.checks": modelChecks(), "rapid.steps": modelStepsEach} {
		if flagSet(name) {
			continue
		}
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { flag.Set(name, flag.Lookup(name).DefValue) })
	}
}

func TestModel(t *testing.T) {
	useModelSize(t)
	modelSteps.Store(0)
	modelDeadlocks.Store(0)
	rapid.Check(t, func(rt *rapid.T) { newModelRun(t, rt).run(rt) })
	t.Logf("%d steps, %d deadlocks reported", modelSteps.Load(), modelDeadlocks.Load())
}

// flagSet reports whether the flag name was given on the command line. The flags are read once,
// before any test sets one for itself: flag.Visit also lists those.
func flagSet(name string) bool { return commandLineFlags()[name] }

var commandLineFlags = sync.OnceValue(func() map[string]bool {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
})

const (
	modelKeys   = 5 // the keys a, b, c, d of column family 0, targets 0..3, and e of column family 1
	modelOwners = 4 // owners 1..4; 0 is a request of no owner
)

// modelOtherCF is the target of the key of column family 1, where no range is ever taken: a wait
// there is one the exception to the order of arrival does not follow (DESIGN §17.2), so a cycle
// through it runs along the edges to the requests queued ahead in column family 0 (§17.3).
const modelOtherCF = modelKeys - 1

// cfOf is the column family of target t.
func cfOf(t int) uint32 {
	if t == modelOtherCF {
		return 1
	}
	return 0
}

// modelRanges are the ranges the check locks, targets modelKeys and up: [Start, End), End nil for
// no upper bound.
var modelRanges = []mSpan{
	{[]byte("a"), []byte("b")},
	{[]byte("a"), []byte("c")},
	{[]byte("b"), []byte("d")},
	{[]byte("c"), nil},
	{[]byte{}, nil},
}

// modelTargets counts the keys and ranges a lock of the check is for.
var modelTargets = modelKeys + len(modelRanges)

// mSpan is the set of keys a lock covers: start <= k < end, end nil for no upper bound.
type mSpan struct{ start, end []byte }

// meets reports whether a and b have a key in common.
func (a mSpan) meets(b mSpan) bool {
	return (b.end == nil || bytes.Compare(a.start, b.end) < 0) && (a.end == nil || bytes.Compare(b.start, a.end) < 0)
}

// modelKey is the key of target k < modelKeys.
func modelKey(k int) []byte { return []byte{'a' + byte(k)} }

// spanOf is the set of keys of target t: a key is the set of itself alone, the keys up to its
// successor key+"\x00".
func spanOf(t int) mSpan {
	if t < modelKeys {
		return mSpan{modelKey(t), append(modelKey(t), 0)}
	}
	return modelRanges[t-modelKeys]
}

// targetName prints target t as a key or as [start, end).
func targetName(t int) string {
	if t < modelKeys {
		return string(modelKey(t))
	}
	s := spanOf(t)
	end := "∞"
	if s.end != nil {
		end = string(s.end)
	}
	return fmt.Sprintf("[%s,%s)", s.start, end)
}

// modelOwner is an owner of the check, named o1, o2, o3.
type modelOwner struct{ name string }

func (o *modelOwner) Name() string { return o.name }

// mHold is a holder in the model.
type mHold struct {
	id       int
	owner    int
	target   int
	shared   bool
	deadline time.Duration
	h        *Claim
}

// mReq is a queued request in the model: a lock, or the upgrade of up.
type mReq struct {
	id       int
	owner    int
	target   int
	shared   bool
	up       *mHold
	lease    time.Duration
	deadline time.Duration // when it times out
	h        *Claim        // the lock's claim; for an upgrade, up.h
	// holds says that its owner held a lock as it asked (flagOwnerHolds): only then does it pass
	// the requests that wait for its owner (model_rules_test.go).
	holds    bool
	cancel   context.CancelFunc
	done     chan error
	returned bool  // done was read
	err      error // what it read
}

// result reads how r's call returned, once.
func (r *mReq) result() error {
	if !r.returned {
		r.returned, r.err = true, <-r.done
	}
	return r.err
}

// hasReturned reports whether r's call has returned, read or not.
func (r *mReq) hasReturned() bool { return r.returned || len(r.done) > 0 }

// exclusive reports whether r asks for an exclusive lock: an exclusive request or an upgrade.
func (r *mReq) exclusive() bool { return r.up != nil || !r.shared }

func (r *mReq) String() string {
	kind := "x"
	switch {
	case r.up != nil:
		kind = "up"
	case r.shared:
		kind = "s"
	}
	return fmt.Sprintf("r%d(o%d %s %s)", r.id, r.owner, kind, targetName(r.target))
}

// modelRun is one sequence: the table, its clock and tenant, and the model.
type modelRun struct {
	t      *testing.T
	tab    *Table
	clk    *ManualClock
	l      *testLocker
	owners [modelOwners + 1]*modelOwner

	now   time.Duration // the model's Mono
	seq   int           // ids of claims and requests
	holds []*mHold      // every holder, of keys and ranges
	queue []*mReq       // every queued request, in the order the rules serve them
	// ended are the requests the model ended in this step, with how each must have ended: nil
	// for a grant, else the error.
	ended map[*mReq]error
	// victims are the requests the table failed with a DeadlockError in this step; deadlocks
	// counts them over the run.
	victims   []*mReq
	deadlocks int
	// rangeMode says that a range was asked for: the table's column family has a range space.
	rangeMode bool
}

func newModelRun(t *testing.T, rt *rapid.T) *modelRun {
	m := &modelRun{t: t, tab: New("model", &Stamps{}), clk: NewManualClock(time.Unix(1, 0)), ended: map[*mReq]error{}}
	m.l = openTestLocker(m.tab, m.clk, slog.New(slog.DiscardHandler))
	for i := 1; i <= modelOwners; i++ {
		m.owners[i] = &modelOwner{name: fmt.Sprintf("o%d", i)}
	}
	return m
}

// spread is under 17 ms, pseudo-random, to make each deadline unique: sums of these rarely meet.
func (m *modelRun) spread() time.Duration {
	m.seq++
	return time.Duration(uint64(m.seq)*0x9e3779b97f4a7c15>>40) + 1
}

func (m *modelRun) run(rt *rapid.T) {
	defer m.finish(rt)
	rt.Repeat(map[string]func(*rapid.T){
		// Locks are drawn three times as often as each other step, so that queues grow.
		"lock":    m.stepLock,
		"lock2":   m.stepLock,
		"lock3":   m.stepLock,
		"release": func(rt *rapid.T) { m.stepEnd(rt, false) },
		"revoke":  func(rt *rapid.T) { m.stepEnd(rt, true) },
		"cancel":  m.stepCancel,
		"advance": m.stepAdvance,
	})
}

// finish releases everything and cancels every request, leaving the table empty.
func (m *modelRun) finish(rt *rapid.T) {
	for _, r := range m.queue {
		r.cancel()
		if !r.returned {
			r.result()
		}
	}
	for _, h := range m.holds {
		h.h.Release()
	}
	m.l.Close()
	if !m.tab.Empty() || m.tab.Deadlines() != 0 {
		rt.Fatalf("the table is not empty once everything was released")
	}
}

// describe prints the model's state.
func (m *modelRun) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "now %v\nheld:", m.now)
	for _, h := range m.holds {
		mode := "x"
		if h.shared {
			mode = "s"
		}
		fmt.Fprintf(&b, " %s by o%d/%s(until %v)", targetName(h.target), h.owner, mode, h.deadline)
	}
	fmt.Fprintf(&b, "\nqueued: %v\n", m.queue)
	return b.String()
}
