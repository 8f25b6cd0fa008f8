package httpdebug_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// A record in a column family other than the default one names the family by its name and ID
// wherever the page shows it: in the holders and waits tables and in the graph's nodes and
// edges. The JSON gives a wait the name too, which WaitInfo does not carry, beside its ID.
func TestColumnFamilyShownByName(t *testing.T) {
	db, cf := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	alpha := txnNamed(t, l, "alpha")
	_, err := alpha.LockCF(ctx, cf, []byte("k"), recordlock.Options{})
	require.NoError(t, err)
	plain, err := l.TryLockCF(cf, []byte("p"), recordlock.Options{})
	require.NoError(t, err)
	beta := txnNamed(t, l, "beta")
	betaWaits := waitFor(t, l, 1, func() error { _, err := beta.LockCF(ctx, cf, []byte("k"), recordlock.Options{}); return err })
	plainWaits := waitFor(t, l, 2, func() error {
		h, err := l.LockCF(ctx, cf, []byte("p"), recordlock.Options{})
		if err == nil {
			h.Release()
		}
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})
	family := fmt.Sprintf("index (%d)", cf.ID())

	_, _, page := get(t, h, http.MethodGet, "/")
	locks := section(t, page, `<table class="locks">`, "</table>")
	assert.Contains(t, locks, `<td class="key">k</td><td>`+family+`</td>`)
	assert.Contains(t, locks, `<td class="key">p</td><td>`+family+`</td>`)
	waits := section(t, page, `<table class="waits">`, "</table>")
	assert.Contains(t, waits, `<td class="key">k</td><td>`+family+`</td>`)
	assert.Contains(t, waits, `<td class="key">p</td><td>`+family+`</td>`)
	svg := section(t, page, "<svg", "</svg>")
	assert.Contains(t, svg, "<title>Txn beta waits for Txn alpha on key k in column family "+family+"</title>")
	assert.Contains(t, svg, "<title>a Lock outside any Txn, waiting for key p in column family "+family+"</title>", "the waiter's node")
	assert.Contains(t, svg, "<title>a lock outside any Txn, holding key p in column family "+family+"</title>", "the holder's node")

	d := getJSON(t, h, "/?format=json").Databases[0]
	require.Len(t, d.Locks, 2)
	for _, lock := range d.Locks {
		assert.Equal(t, "index", lock.ColumnFamily, lock.Key)
		assert.Equal(t, cf.ID(), lock.ColumnFamilyID, lock.Key)
	}
	require.Len(t, d.Waits, 2)
	for _, wait := range d.Waits {
		assert.Equal(t, "index", wait.ColumnFamily, wait.Key)
		assert.Equal(t, cf.ID(), wait.ColumnFamilyID, wait.Key)
	}

	require.True(t, plain.Release())
	require.NoError(t, done(t, plainWaits))
	alpha.Rollback()
	require.NoError(t, done(t, betaWaits))
}

// Past the limit, where the page reads no holder beyond those of the waits it keeps, a wait's
// column family is still named, from the holders read with it: here two sharers of the key, one
// of them left out.
func TestColumnFamilyNamedPastTheLimit(t *testing.T) {
	db, cf := openDB(t)
	_, l := manual(t, db)
	for range 2 {
		_, err := l.TryLockCF(cf, []byte("s"), recordlock.Options{Shared: true})
		require.NoError(t, err)
	}
	waits := waitFor(t, l, 1, func() error {
		_, err := l.LockCF(context.Background(), cf, []byte("s"), recordlock.Options{})
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})

	d := getJSON(t, h, "/?format=json&limit=1").Databases[0]
	require.Len(t, d.Locks, 1)
	require.Equal(t, 1, *d.LocksOmitted)
	require.Len(t, d.Waits, 1)
	assert.Equal(t, "index", d.Waits[0].ColumnFamily)
	_, _, page := get(t, h, http.MethodGet, "/?limit=1")
	assert.Contains(t, section(t, page, `<table class="waits">`, "</table>"),
		fmt.Sprintf(`<td class="key">s</td><td>index (%d)</td>`, cf.ID()))

	require.NoError(t, l.Close()) // fails the waiter, which would wait on the ManualClock forever
	require.ErrorIs(t, done(t, waits), recordlock.ErrClosed)
}

// A range request that waits only for holders of keys inside it, which the page reads from
// Locks rather than with the waits, names its column family too.
func TestColumnFamilyNamedForARangeWait(t *testing.T) {
	db, cf := openDB(t)
	_, l := manual(t, db)
	_, err := l.TryLockCF(cf, []byte("b"), recordlock.Options{})
	require.NoError(t, err)
	waits := waitFor(t, l, 1, func() error {
		_, err := l.LockRangeCF(context.Background(), cf, recordlock.Range{Start: []byte("a"), End: []byte("c")}, recordlock.Options{})
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})

	d := getJSON(t, h, "/?format=json").Databases[0]
	require.Len(t, d.Waits, 1)
	assert.True(t, d.Waits[0].IsRange)
	assert.Equal(t, "index", d.Waits[0].ColumnFamily)
	_, _, page := get(t, h, http.MethodGet, "/")
	assert.Contains(t, section(t, page, `<table class="waits">`, "</table>"),
		fmt.Sprintf(`<td class="key">[a, c)</td><td>index (%d)</td>`, cf.ID()))

	require.NoError(t, l.Close()) // fails the waiter, which would wait on the ManualClock forever
	require.ErrorIs(t, done(t, waits), recordlock.ErrClosed)
}
