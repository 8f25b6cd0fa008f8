package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// Through the public API only: a Txn whose column family is dropped while it is open commits at
// the same instant as 32 Txns that each write a key of their own in the default family. Whatever
// each Commit returns must be true of its write, read at once and again after the database is
// reopened (which replays RocksDB's log): nil, the write is there; ErrCommitAmbiguous, either;
// any other error, it is not. Which Txns RocksDB or the commit queue put in one write is left to
// timing, so the test runs several rounds.
func TestCommitOutcomeTrueBesideDroppedFamily(t *testing.T) {
	const innocents, rounds = 32, 3
	for round := range rounds {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			dir := t.TempDir()
			opts := tempdb.Options()
			defer opts.Destroy()
			db, cfs, err := grocksdb.OpenDbColumnFamilies(opts, dir, []string{"default", "doomed"},
				[]*grocksdb.Options{opts, opts})
			require.NoError(t, err)
			l, err := recordlock.New(db)
			require.NoError(t, err)
			ctx, lease := context.Background(), recordlock.Options{Lease: time.Minute}

			txns := make([]*recordlock.Txn, innocents+1) // txns[innocents] is the doomed one
			for i := range txns {
				txns[i] = l.Begin()
				defer txns[i].Rollback()
				key := outcomeKey(i, innocents)
				_, err := txns[i].Lock(ctx, key, lease)
				require.NoError(t, err)
				require.NoError(t, txns[i].Put(key, []byte("v")))
			}
			doomed := txns[innocents]
			_, err = doomed.LockCF(ctx, cfs[1], []byte("doomed"), lease)
			require.NoError(t, err)
			require.NoError(t, doomed.PutCF(cfs[1], []byte("doomed"), []byte("v")))
			require.NoError(t, db.DropColumnFamily(cfs[1]))

			errs := make([]error, len(txns))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, txn := range txns {
				wg.Go(func() {
					<-start
					errs[i] = txn.Commit()
				})
			}
			close(start)
			wg.Wait()

			check := func(when string, db *grocksdb.DB) {
				ro := grocksdb.NewDefaultReadOptions()
				defer ro.Destroy()
				for i, err := range errs {
					key := outcomeKey(i, innocents)
					got, rerr := db.GetBytes(ro, key)
					require.NoError(t, rerr)
					switch {
					case err == nil:
						assert.Equal(t, "v", string(got), "%s %s: Commit returned nil, so its write must be there", when, key)
					case errors.Is(err, recordlock.ErrCommitAmbiguous):
					default:
						assert.Nil(t, got, "%s %s: Commit failed with %v, which says nothing landed, yet its write is there", when, key, err)
					}
				}
			}
			check("at once:", db)
			require.NoError(t, l.Close())
			for _, cf := range cfs {
				cf.Destroy()
			}
			db.Close()
			db, err = grocksdb.OpenDb(opts, dir)
			require.NoError(t, err, "reopen")
			defer db.Close()
			check("after a reopen:", db)
			require.Error(t, errs[innocents], "the doomed Txn cannot have landed whole")
			var landed, ambiguous int
			for _, err := range errs {
				switch {
				case err == nil:
					landed++
				case errors.Is(err, recordlock.ErrCommitAmbiguous):
					ambiguous++
				}
			}
			t.Logf("%d Txns checked: %d told they landed, %d told the outcome is unknown, %d told nothing landed",
				len(errs), landed, ambiguous, len(errs)-landed-ambiguous)
		})
	}
}

// outcomeKey is the default-family key Txn i of TestCommitOutcomeTrueBesideDroppedFamily writes;
// the doomed Txn, i == innocents, writes one too, so that its outcome can be read back.
func outcomeKey(i, innocents int) []byte {
	if i == innocents {
		return []byte("doomed:default")
	}
	return fmt.Appendf(nil, "innocent:%02d", i)
}
