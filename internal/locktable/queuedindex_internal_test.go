package locktable

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/invariants"
	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/require"
)

// The views' index of a space's queued requests counts, for every holder of a range or of a key
// in the home shard, the same conflicting requests as a walk of the requests that meet it, each
// asked conflicts (requestsOver), whatever the spans, modes and owners: random holders and random
// queued requests, of owners and of none, over keys a..h, compared under the home shard's mutex
// at one instant.
func TestQueuedIndexCountsAsAWalkOfTheQueue(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
			owners := []Owner{nil, &otherOwner{"o1"}, &otherOwner{"o2"}, &otherOwner{"o3"}, &otherOwner{"o4"}}
			key := func() string { return string(rune('a' + r.IntN(8))) }
			span := func() (string, string) {
				start, end := key(), key()
				switch {
				case r.IntN(4) == 0:
					end = ""
				case end <= start:
					end = start + "\x00"
				}
				return start, end
			}
			// take draws a request at random, on the test's goroutine, and returns the call that
			// makes it, which may run on another.
			take := func(owner Owner, wait bool, done func(*Claim, error)) func() {
				o := testOptions{Shared: r.IntN(2) == 0, Timeout: time.Hour}
				if r.IntN(3) == 0 {
					k := []byte(key())
					return func() { done(l.acquire(context.Background(), k, o, owner, wait)) }
				}
				start, end := span()
				return func() { done(l.acquireRange(context.Background(), []byte(start), endOf(end), o, owner, wait)) }
			}
			var held []*Claim
			for range 4 + r.IntN(8) {
				take(owners[r.IntN(len(owners))], false, func(h *Claim, err error) {
					if err == nil {
						held = append(held, h)
					}
				})()
			}
			if l.tab.spaceOf(0) == nil { // no range taken yet: one, so that there is a space
				h, err := l.TryLockRange("a", "b", testOptions{Shared: true})
				require.NoError(t, err)
				held = append(held, h)
			}
			var returned atomic.Int32
			launched := 0
			for _, owner := range owners {
				n := 1 + r.IntN(3) // several requests of no owner, one of each owner
				if owner != nil {
					n = 1
				}
				for range n {
					launched++
					go take(owner, true, func(h *Claim, err error) {
						if err == nil {
							h.Release()
						}
						returned.Add(1)
					})()
				}
			}
			testutil.WaitUntil(t, "every request returned or queued", func() bool {
				return l.tab.Counts().Waiting+int(returned.Load()) == launched
			})

			sp := l.tab.spaceOf(0)
			sp.home.mu.Lock()
			x := sp.indexQueued(new(invariants.Counter))
			check := func(h *Claim) {
				want := 0
				sp.requestsOver(h, func(r *Claim) {
					if conflicts(h, r) {
						want++
					}
				})
				if got := x.conflicting(h); want != got {
					sp.home.mu.Unlock()
					t.Fatalf("holder %q (range %v, shared %v, owner %v): the index counts %d conflicting requests, a walk %d",
						h.key(), h.isRange(), h.flags()&flagShared != 0, h.owner, got, want)
				}
			}
			checked := 0
			for _, tr := range []*rangeTree{&sp.ranges.shared, &sp.ranges.exclusive} {
				tr.Meeting(nil, nil, func(y *Claim) bool { check(y); checked++; return true })
			}
			sp.keys.Ascend(func(e *keyEntry) bool {
				for _, h := range e.appendHolders(nil) {
					check(h)
					checked++
				}
				return true
			})
			sp.home.mu.Unlock()
			require.Positive(t, checked)
			t.Logf("checked %d holders, %d requests queued", checked, launched-int(returned.Load()))

			for _, h := range held {
				h.Release()
			}
			testutil.WaitUntil(t, "every request returned", func() bool { return int(returned.Load()) == launched })
		})
	}
}
