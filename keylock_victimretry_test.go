package recordlock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// The victim of a deadlock that rolls back and retries at once finds the key it gave up handed to
// the Txn it lost to, which holds the other key of the cycle: it queues behind that Txn instead
// of taking the key back and closing the same cycle again (docs/DESIGN.md §6). The winner holds
// x by a lock of its own, by a range lock over it (a Txn that holds only ranges holds keys too),
// or by LockAll, whose first key it already holds as it waits for the second.
func TestDeadlockVictimRetryQueuesBehindWinner(t *testing.T) {
	x, y := []byte("x"), []byte("y")
	for _, name := range []string{"Lock", "LockRange", "LockAll"} {
		t.Run(name, func(t *testing.T) {
			db := openDB(t)
			_, l := manual(t, db)
			winner, victim := l.Begin(), l.Begin()
			defer winner.Rollback()
			defer victim.Rollback()
			_, err := victim.Lock(context.Background(), y, recordlock.Options{})
			require.NoError(t, err)
			var won <-chan error
			switch name {
			case "LockAll":
				c := lockAllAsync(context.Background(), winner, recordlock.Options{}, x, y)
				won = receive(c, func(r lockAllResult) error { return r.err })
			case "LockRange":
				_, err := winner.LockRange(context.Background(), rng("w", "xx"), recordlock.Options{})
				require.NoError(t, err)
				c := txnLockAsync(winner, y, recordlock.Options{})
				won = receive(c, func(r lockResult) error { return r.err })
			default:
				_, err := winner.Lock(context.Background(), x, recordlock.Options{})
				require.NoError(t, err)
				c := txnLockAsync(winner, y, recordlock.Options{})
				won = receive(c, func(r lockResult) error { return r.err })
			}
			waitQueued(t, l, y, 1)

			_, err = victim.Lock(context.Background(), x, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrDeadlock)
			victim.Rollback()
			// The retry's first Lock, made before the winner's goroutine may have run.
			_, err = l.TryLock(y, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrLocked, "the victim's key went to the winner")

			require.NoError(t, await(t, won, "the winner's Lock"))
			require.NoError(t, winner.Put(x, []byte("1")))
			require.NoError(t, winner.Put(y, []byte("1")))
			require.NoError(t, winner.Commit())
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}

// receive forwards the error of the one result c delivers.
func receive[T any](c <-chan T, err func(T) error) <-chan error {
	out := make(chan error, 1)
	go func() { out <- err(<-c) }()
	return out
}
