package recordlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Many keys in one Txn: the lookups stay correct past the size where they switch to a map.
func TestTxnManyKeys(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	const n = 50
	first := map[int]*recordlock.Handle{}
	for i := range n {
		k := []byte("k" + strconv.Itoa(i))
		if i%2 == 0 {
			h, err := txn.Lock(ctx, k, recordlock.Options{})
			require.NoError(t, err)
			first[i] = h
		}
		require.NoError(t, txn.Put(k, []byte("v1")))
	}
	for i := range n {
		k := []byte("k" + strconv.Itoa(i))
		h, err := txn.Lock(ctx, k, recordlock.Options{Timeout: time.Millisecond})
		require.NoError(t, err)
		if prev, ok := first[i]; ok {
			require.Same(t, prev, h, "key %d is re-entered", i)
		}
		require.NoError(t, txn.Put(k, []byte("v"+strconv.Itoa(i))))
		got, err := txn.Get(k)
		require.NoError(t, err)
		require.Equal(t, "v"+strconv.Itoa(i), string(got))
	}
	require.NoError(t, txn.Commit())
	for i := range n {
		k := "k" + strconv.Itoa(i)
		assert.Equal(t, "v"+strconv.Itoa(i), string(dbGet(t, db, k)))
		_, err := l.TryLock([]byte(k), recordlock.Options{})
		require.NoError(t, err, "Commit released %s", k)
	}
}
