package recordlock_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// liveHeap is the bytes of live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heldBytes is the growth of the live heap per lock while take's n locks are held, the handle
// pointer the caller keeps for each included, and what is left per lock once all are released.
func heldBytes(t *testing.T, n int, take func(i int) *recordlock.Handle) (held, left float64) {
	t.Helper()
	start := liveHeap()
	handles := make([]*recordlock.Handle, 0, n)
	for i := range n {
		handles = append(handles, take(i))
	}
	full := liveHeap()
	for _, h := range handles {
		require.True(t, h.Release())
	}
	handles = nil
	end := liveHeap()
	return (float64(full) - float64(start)) / float64(n), (float64(end) - float64(start)) / float64(n)
}

// Memory per held lock: a key lock, with ranges in use in its column family or not, under a range
// or beside one, stays within 256 B, and a range lock within 384 B; once they are released, next to nothing is left.
func TestHeldLockMemory(t *testing.T) {
	const n = 50_000
	ctx := context.Background()
	opts := recordlock.Options{Lease: 5 * time.Minute}
	shared := recordlock.Options{Lease: opts.Lease, Shared: true}
	keyOf := func(i int) []byte { return fmt.Appendf(nil, "record/%09d", i) }
	cases := []struct {
		name  string
		bound float64
		setup func(l *recordlock.Locker)
		take  func(l *recordlock.Locker, i int) (*recordlock.Handle, error)
	}{
		{"keys", 256, nil, func(l *recordlock.Locker, i int) (*recordlock.Handle, error) {
			return l.Lock(ctx, keyOf(i), opts)
		}},
		{"keysbesidearange", 256, func(l *recordlock.Locker) {
			_, err := l.LockRange(ctx, recordlock.Prefix([]byte("other/")), opts)
			require.NoError(t, err)
		}, func(l *recordlock.Locker, i int) (*recordlock.Handle, error) {
			return l.Lock(ctx, keyOf(i), opts)
		}},
		{"keysunderarange", 256, func(l *recordlock.Locker) {
			// Every key lock under it is kept in the column family's home shard.
			_, err := l.LockRange(ctx, recordlock.Prefix(nil), shared)
			require.NoError(t, err)
		}, func(l *recordlock.Locker, i int) (*recordlock.Handle, error) {
			return l.Lock(ctx, keyOf(i), shared)
		}},
		{"ranges", 384, nil, func(l *recordlock.Locker, i int) (*recordlock.Handle, error) {
			k := keyOf(i)
			return l.LockRange(ctx, recordlock.Range{Start: k, End: append(k, 0)}, opts)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLocker(t, openDB(t))
			if c.setup != nil {
				c.setup(l)
			}
			held, left := heldBytes(t, n, func(i int) *recordlock.Handle {
				h, err := c.take(l, i)
				require.NoError(t, err)
				return h
			})
			t.Logf("%.1f B per held lock, %.1f B per lock left after release", held, left)
			assert.LessOrEqual(t, held, c.bound)
			assert.LessOrEqual(t, left, 16.0, "the table returns to its idle size")
		})
	}
}
