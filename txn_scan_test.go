package recordlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// scanned returns what a ScanCF of r shows, as "key=value" in the order fn saw them.
func scanned(t testing.TB, txn *recordlock.Txn, cf *grocksdb.ColumnFamilyHandle, r recordlock.Range) []string {
	t.Helper()
	var seen []string
	require.NoError(t, txn.ScanCF(cf, r, func(key, value []byte) error {
		seen = append(seen, string(key)+"="+string(value))
		return nil
	}))
	return seen
}

// rng is the Range [start, end), a nil end for "" meaning no bound.
func rng(start, end string) recordlock.Range {
	r := recordlock.Range{Start: []byte(start)}
	if end != "" {
		r.End = []byte(end)
	}
	return r
}

// A scan shows the keys of its range in ascending bytewise order, Start included and End
// excluded, and a Prefix range exactly the keys that begin with the prefix, 0xFF bytes included.
func TestScanBounds(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	for _, k := range []string{"a", "ab", "b", "b\x00", "c", "d", "\xfe", "\xff", "\xff\x00", "\xff\xff", "a\xff", "a\xff\x01"} {
		dbPut(t, db, k, "v"+k)
	}
	txn := l.Begin()
	defer txn.Rollback()

	for _, tc := range []struct {
		name string
		r    recordlock.Range
		want []string
	}{
		{"everything", recordlock.Range{}, []string{"a", "ab", "a\xff", "a\xff\x01", "b", "b\x00", "c", "d", "\xfe", "\xff", "\xff\x00", "\xff\xff"}},
		{"Start included, End excluded", rng("ab", "b\x00"), []string{"ab", "a\xff", "a\xff\x01", "b"}},
		{"from a key that is not there", rng("aa", "b"), []string{"ab", "a\xff", "a\xff\x01"}},
		{"unbounded above", rng("d", ""), []string{"d", "\xfe", "\xff", "\xff\x00", "\xff\xff"}},
		{"bounded above from the first key", recordlock.Range{End: []byte("ab")}, []string{"a"}},
		{"one key wide", rng("c", "c\x00"), []string{"c"}},
		{"empty", rng("c\x00", "d"), nil},
		{"Prefix", recordlock.Prefix([]byte("a")), []string{"a", "ab", "a\xff", "a\xff\x01"}},
		{"Prefix ending in 0xFF", recordlock.Prefix([]byte("a\xff")), []string{"a\xff", "a\xff\x01"}},
		{"Prefix of one 0xFF", recordlock.Prefix([]byte("\xff")), []string{"\xff", "\xff\x00", "\xff\xff"}},
		{"Prefix of two 0xFF", recordlock.Prefix([]byte("\xff\xff")), []string{"\xff\xff"}},
		{"Prefix(nil)", recordlock.Prefix(nil), []string{"a", "ab", "a\xff", "a\xff\x01", "b", "b\x00", "c", "d", "\xfe", "\xff", "\xff\x00", "\xff\xff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for _, k := range tc.want {
				want = append(want, k+"=v"+k)
			}
			assert.Equal(t, want, scanned(t, txn, nil, tc.r))
		})
	}
}

// A scan merges the Txn's staged writes over the database: a staged Put is seen with its value
// whether or not the database has the key, a staged Delete hides the key, and the latest staged
// write of a key wins. Another writer's committed change is seen at once (no snapshot).
func TestScanSeesStagedWrites(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	for _, k := range []string{"a", "b", "c", "d", "z"} {
		dbPut(t, db, k, "db-"+k)
	}
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	put := func(k, v string) { require.NoError(t, txn.Put([]byte(k), []byte(v))) }
	del := func(k string) { require.NoError(t, txn.Delete([]byte(k))) }

	put("b", "b1")
	del("c")
	put("bb", "new") // not in the database
	put("a", "a1")
	put("a", "a2") // the latest write of a wins
	del("d")
	put("d", "d-again") // a Put after a Delete shows the key
	put("e", "e1")
	del("e") // a Delete after a Put hides it
	del("nope")
	put("y", "y1")
	put("zz", "outside the range")

	r := rng("a", "z")
	assert.Equal(t, []string{"a=a2", "b=b1", "bb=new", "d=d-again", "y=y1"}, scanned(t, txn, nil, r))

	dbPut(t, db, "c2", "committed meanwhile")
	assert.Equal(t, []string{"a=a2", "b=b1", "bb=new", "c2=committed meanwhile", "d=d-again", "y=y1"}, scanned(t, txn, nil, r))

	// After Commit the database holds what the scan showed.
	require.NoError(t, txn.Commit())
	check := l.Begin()
	defer check.Rollback()
	assert.Equal(t, []string{"a=a2", "b=b1", "bb=new", "c2=committed meanwhile", "d=d-again", "y=y1"}, scanned(t, check, nil, r))
}

// Writes undone by RollbackToSavePoint are not seen; the ones before the mark are.
func TestScanRespectsSavePoints(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	dbPut(t, db, "k2", "db")
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	require.NoError(t, txn.Put([]byte("k1"), []byte("before")))
	txn.SetSavePoint()
	require.NoError(t, txn.Put([]byte("k1"), []byte("after")))
	require.NoError(t, txn.Delete([]byte("k2")))
	require.NoError(t, txn.Put([]byte("k3"), []byte("after")))
	assert.Equal(t, []string{"k1=after", "k3=after"}, scanned(t, txn, nil, recordlock.Range{}))

	require.NoError(t, txn.RollbackToSavePoint())
	assert.Equal(t, []string{"k1=before", "k2=db"}, scanned(t, txn, nil, recordlock.Range{}))
}

// fn may write in the Txn while the scan runs: the rest of the scan shows the staged writes of
// the moment it began, unchanged even when fn rolls back to a savepoint and stages new writes
// (whose bytes must not overwrite the ones the scan still shows), and a later scan shows fn's.
func TestScanWhileFnWrites(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	txn.SetSavePoint()
	require.NoError(t, txn.Put([]byte("a"), []byte("1")))
	require.NoError(t, txn.Put([]byte("b"), []byte("2")))
	require.NoError(t, txn.Put([]byte("c"), []byte("3")))

	var seen []string
	require.NoError(t, txn.Scan(recordlock.Range{}, func(key, value []byte) error {
		seen = append(seen, string(key)+"="+string(value))
		if string(key) == "a" {
			require.NoError(t, txn.RollbackToSavePoint())
			require.NoError(t, txn.Put([]byte("x"), []byte("9")))
			require.NoError(t, txn.Put([]byte("y"), []byte("8")))
		}
		return nil
	}))
	assert.Equal(t, []string{"a=1", "b=2", "c=3"}, seen, "the scan shows the writes staged when it began")
	assert.Equal(t, []string{"x=9", "y=8"}, scanned(t, txn, nil, recordlock.Range{}))
}

// A non-nil error from fn stops the scan at once and comes back as is; so does a Commit inside
// fn, which ends the Txn (the scan stops with ErrTxnDone), and the Locker's Close (ErrClosed).
func TestScanStops(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	for _, k := range []string{"a", "b", "c", "d"} {
		dbPut(t, db, k, k)
	}
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	require.NoError(t, txn.Put([]byte("bb"), []byte("staged")))
	stop := errors.New("enough")
	for _, after := range []int{1, 3} { // a database key, then a staged one
		calls := 0
		err := txn.Scan(recordlock.Range{}, func(key, value []byte) error {
			calls++
			if calls == after {
				return stop
			}
			return nil
		})
		assert.Same(t, stop, err)
		assert.Equal(t, after, calls)
	}

	calls := 0
	err := txn.Scan(recordlock.Range{}, func(key, value []byte) error {
		calls++
		return txn.Commit()
	})
	require.ErrorIs(t, err, recordlock.ErrTxnDone)
	assert.Equal(t, 1, calls)

	// So does the Locker's Close: the scan stops with ErrClosed.
	open := l.Begin()
	defer open.Rollback()
	calls = 0
	err = open.Scan(recordlock.Range{}, func(key, value []byte) error {
		calls++
		return l.Close()
	})
	require.ErrorIs(t, err, recordlock.ErrClosed)
	assert.Equal(t, 1, calls)
}

// Scan refuses, calling fn never: an invalid range (ErrInvalidKey), a Txn that ended
// (ErrTxnDone), a closed Locker (ErrClosed), and a column family of another database (the
// ErrInvalidOptions of every CF call of a Txn).
func TestScanRefuses(t *testing.T) {
	db, cfs := openCFDB(t, "orders")
	_, foreign := openCFDB(t, "x", "y")
	_, l := manual(t, db)
	dbPut(t, db, "a", "a")
	never := func(key, value []byte) error {
		t.Errorf("fn called with %q", key)
		return nil
	}

	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	require.NoError(t, txn.Put([]byte("b"), []byte("b")))
	for _, r := range []recordlock.Range{rng("b", "a"), rng("a", "a"), {End: []byte{}}} {
		require.ErrorIs(t, txn.Scan(r, never), recordlock.ErrInvalidKey, "%q", r)
		require.ErrorIs(t, txn.ScanCF(cfs[0], r, never), recordlock.ErrInvalidKey, "%q", r)
	}
	_, err := txn.GetCF(foreign[1], []byte("a"))
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	require.ErrorIs(t, txn.ScanCF(foreign[1], recordlock.Range{}, never), recordlock.ErrInvalidOptions)
	assert.Equal(t, []string{"a=a", "b=b"}, scanned(t, txn, nil, recordlock.Range{}), "a refused scan changed nothing")

	done := l.Begin()
	done.Rollback()
	require.ErrorIs(t, done.Scan(recordlock.Range{}, never), recordlock.ErrTxnDone)
	committed := l.Begin()
	require.NoError(t, committed.Commit())
	require.ErrorIs(t, committed.ScanCF(cfs[0], recordlock.Range{}, never), recordlock.ErrTxnDone)

	open := l.Begin()
	require.NoError(t, l.Close())
	require.ErrorIs(t, open.Scan(recordlock.Range{}, never), recordlock.ErrClosed)
	require.ErrorIs(t, open.ScanCF(cfs[0], rng("b", "a"), never), recordlock.ErrClosed, "Close is reported first, as by Get")
}

// ScanCF reads one column family: the same key in two families is two records, and a write
// staged in one is not seen in the other.
func TestScanColumnFamilies(t *testing.T) {
	db, cfs := openCFDB(t, "index")
	idx := cfs[0]
	_, l := manual(t, db)
	dbPut(t, db, "k1", "default")
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	require.NoError(t, db.PutCF(wo, idx, []byte("k1"), []byte("index")))
	require.NoError(t, db.PutCF(wo, idx, []byte("k2"), []byte("index")))

	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	require.NoError(t, txn.PutCF(idx, []byte("k3"), []byte("staged in index")))
	require.NoError(t, txn.DeleteCF(idx, []byte("k1")))
	require.NoError(t, txn.Put([]byte("k4"), []byte("staged in default")))

	assert.Equal(t, []string{"k2=index", "k3=staged in index"}, scanned(t, txn, idx, recordlock.Prefix([]byte("k"))))
	assert.Equal(t, []string{"k1=default", "k4=staged in default"}, scanned(t, txn, nil, recordlock.Prefix([]byte("k"))))
	var plain []string
	require.NoError(t, txn.Scan(recordlock.Prefix([]byte("k")), func(key, value []byte) error {
		plain = append(plain, string(key)+"="+string(value))
		return nil
	}))
	assert.Equal(t, []string{"k1=default", "k4=staged in default"}, plain, "Scan is ScanCF of the default family")
}

// A key of the range that the Txn holds by a lock whose lease has ended fails the scan with
// ErrLeaseExpired, as Get of that key does, whether or not the database has the key; a range
// without such a key, or a key whose lock the Txn released, scans as before.
func TestScanUnderLapsedLock(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "a", "a")
	dbPut(t, db, "c", "c")
	txn := l.Begin()
	defer txn.Rollback()
	short := recordlock.Options{Lease: time.Second, Scope: recordlock.ScopeNode}
	long := recordlock.Options{Lease: time.Minute, Scope: recordlock.ScopeNode}
	_, err := txn.Lock(ctx, []byte("b"), short) // not in the database
	require.NoError(t, err)
	_, err = txn.Lock(ctx, []byte("c"), long)
	require.NoError(t, err)
	released, err := txn.Lock(ctx, []byte("e"), short)
	require.NoError(t, err)
	require.True(t, released.Release())
	assert.Equal(t, []string{"a=a", "c=c"}, scanned(t, txn, nil, recordlock.Range{}))

	clk.Advance(2 * time.Second)
	_, err = txn.Get([]byte("b"))
	require.ErrorIs(t, err, recordlock.ErrLeaseExpired, "Get of the key fails")
	calls := 0
	count := func(key, value []byte) error { calls++; return nil }
	require.ErrorIs(t, txn.Scan(recordlock.Range{}, count), recordlock.ErrLeaseExpired)
	require.ErrorIs(t, txn.Scan(rng("b", "b\x00"), count), recordlock.ErrLeaseExpired)
	assert.Zero(t, calls, "fn is never called")
	assert.Equal(t, []string{"c=c"}, scanned(t, txn, nil, rng("b\x00", "")), "a range without b, with the released e")
	assert.Equal(t, []string{"a=a"}, scanned(t, txn, nil, rng("a", "b")), "End excludes b")

	// Re-locked, b is protected again by its new handle.
	_, err = txn.Lock(ctx, []byte("b"), long)
	require.NoError(t, err)
	assert.Equal(t, []string{"a=a", "c=c"}, scanned(t, txn, nil, recordlock.Range{}))

	// A revoked lease ends protection as a lapsed one does.
	revoked, err := txn.Lock(ctx, []byte("d"), long)
	require.NoError(t, err)
	revoked.RevokeLease()
	require.ErrorIs(t, txn.Scan(rng("c", "e"), count), recordlock.ErrLeaseExpired)
	assert.Zero(t, calls)
}
