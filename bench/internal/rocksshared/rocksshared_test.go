package rocksshared_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/bench/internal/rocksshared"
)

// timedOut is how RocksDB's message for a lock request that timed out begins.
const timedOut = "Operation timed out"

// Two transactions hold a key shared at once; an exclusive request waits for both and times
// out, and gets the key once both have committed.
func TestSharedLocksCoexist(t *testing.T) {
	d := openDB(t)
	d.put(t, "price", "42")
	r1, r2, w := d.begin(t), d.begin(t), d.begin(t)

	v, found, err := rocksshared.GetForUpdate(nil, r1, d.ro, []byte("price"), false)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, "42", string(v))
	v, found, err = rocksshared.GetForUpdate(nil, r2, d.ro, []byte("price"), false)
	require.NoError(t, err, "a second shared lock while the first is held")
	assert.True(t, found)
	assert.Equal(t, "42", string(v))

	_, _, err = rocksshared.GetForUpdate(nil, w, d.ro, []byte("price"), true)
	require.ErrorContains(t, err, timedOut, "an exclusive lock while two shared ones are held")
	_, err = w.GetForUpdate(d.ro, []byte("price"))
	require.ErrorContains(t, err, timedOut, "grocksdb's own (exclusive) GetForUpdate too")

	require.NoError(t, r1.Commit())
	_, _, err = rocksshared.GetForUpdate(nil, w, d.ro, []byte("price"), true)
	require.ErrorContains(t, err, timedOut, "an exclusive lock while one shared one is held")
	require.NoError(t, r2.Commit())
	v, found, err = rocksshared.GetForUpdate(nil, w, d.ro, []byte("price"), true)
	require.NoError(t, err, "an exclusive lock once the sharers committed")
	assert.True(t, found)
	assert.Equal(t, "42", string(v))
	require.NoError(t, w.Put([]byte("price"), []byte("43")))
	require.NoError(t, w.Commit())
}

// An exclusive lock taken with exclusive=true keeps shared requests out until it commits.
func TestExclusiveExcludesShared(t *testing.T) {
	d := openDB(t)
	d.put(t, "price", "42")
	w, r := d.begin(t), d.begin(t)

	_, _, err := rocksshared.GetForUpdate(nil, w, d.ro, []byte("price"), true)
	require.NoError(t, err)
	_, _, err = rocksshared.GetForUpdate(nil, r, d.ro, []byte("price"), false)
	require.ErrorContains(t, err, timedOut, "a shared lock while an exclusive one is held")
	require.NoError(t, w.Put([]byte("price"), []byte("43")))
	require.NoError(t, w.Commit())

	v, found, err := rocksshared.GetForUpdate(nil, r, d.ro, []byte("price"), false)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, "43", string(v), "the shared read sees the committed write")
}

// A missing key reads as not found, leaves dst as it was, and is locked all the same.
func TestMissingKeyLocked(t *testing.T) {
	d := openDB(t)
	r, w := d.begin(t), d.begin(t)
	dst := []byte("prefix:")

	v, found, err := rocksshared.GetForUpdate(dst, r, d.ro, []byte("nothing"), false)
	require.NoError(t, err)
	assert.False(t, found)
	assert.Equal(t, "prefix:", string(v))
	_, err = w.GetForUpdate(d.ro, []byte("nothing"))
	require.ErrorContains(t, err, timedOut, "the missing key is locked shared")
}

// The value is appended to dst, and a key that is a prefix of another is its own record.
func TestAppendsToDst(t *testing.T) {
	d := openDB(t)
	d.put(t, "k", "v1")
	d.put(t, "kk", "v2")
	txn := d.begin(t)
	dst := make([]byte, 0, 64)
	dst = append(dst, "a="...)

	v, found, err := rocksshared.GetForUpdate(dst, txn, d.ro, []byte("k"), false)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, "a=v1", string(v))
	v, found, err = rocksshared.GetForUpdate(append(v, ",b="...), txn, d.ro, []byte("kk"), false)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, "a=v1,b=v2", string(v))
	assert.Equal(t, &dst[:1][0], &v[:1][0], "appended in place while dst has room")
}

// A nil or destroyed argument is an error, not a crash.
func TestBadArguments(t *testing.T) {
	d := openDB(t)
	txn := d.begin(t)
	_, _, err := rocksshared.GetForUpdate(nil, nil, d.ro, []byte("k"), false)
	assert.ErrorContains(t, err, "nil Transaction")
	_, _, err = rocksshared.GetForUpdate(nil, txn, nil, []byte("k"), false)
	assert.ErrorContains(t, err, "nil Transaction or ReadOptions")

	gone := d.tdb.TransactionBegin(d.wo, d.to, nil)
	gone.Destroy() // grocksdb clears its C pointer
	_, _, err = rocksshared.GetForUpdate(nil, gone, d.ro, []byte("k"), false)
	assert.ErrorContains(t, err, "destroyed")
	ro := grocksdb.NewDefaultReadOptions()
	ro.Destroy()
	_, _, err = rocksshared.GetForUpdate(nil, txn, ro, []byte("k"), false)
	assert.ErrorContains(t, err, "destroyed")
}

// GetForUpdate frees the value and the error message RocksDB allocates for each call: 2,000
// reads of a 4 KiB value, then 20,000 lock timeouts, leave the C heap as it was, where keeping
// them would grow it by about 8 MB and 1.3 MB.
func TestFreesWhatRocksDBAllocates(t *testing.T) {
	d := openDB(t)
	big := bytes.Repeat([]byte("x"), 4096)
	require.NoError(t, d.tdb.Put(d.wo, []byte("big"), big))
	holder, r := d.begin(t), d.begin(t)
	_, _, err := rocksshared.GetForUpdate(nil, holder, d.ro, []byte("held"), true)
	require.NoError(t, err)
	d.to.SetLockTimeout(0) // the next transaction fails at once on a held key
	refused := d.begin(t)
	buf := make([]byte, 0, len(big))

	reads := func(n int) {
		for range n {
			v, found, err := rocksshared.GetForUpdate(buf[:0], r, d.ro, []byte("big"), false)
			require.NoError(t, err)
			require.True(t, found)
			require.Len(t, v, len(big))
		}
	}
	timeouts := func(n int) {
		for range n {
			_, _, err := rocksshared.GetForUpdate(nil, refused, d.ro, []byte("held"), false)
			require.ErrorContains(t, err, timedOut)
		}
	}
	reads(100) // warm up RocksDB's caches and the malloc arenas
	timeouts(100)

	before := rocksshared.CHeapInUse()
	reads(2000)
	after := rocksshared.CHeapInUse()
	assert.Less(t, int64(after)-int64(before), int64(1<<20),
		"the C heap grew from %d to %d bytes over 2,000 reads", before, after)
	before = rocksshared.CHeapInUse()
	timeouts(20000)
	after = rocksshared.CHeapInUse()
	assert.Less(t, int64(after)-int64(before), int64(256<<10),
		"the C heap grew from %d to %d bytes over 20,000 lock timeouts", before, after)
}

// The layout check accepts grocksdb's structs and refuses one whose first field is not the C
// pointer it names.
func TestLayoutCheck(t *testing.T) {
	require.NoError(t, rocksshared.CheckLayout(reflect.TypeFor[grocksdb.Transaction](), "_Ctype_struct_rocksdb_transaction_t"))
	require.NoError(t, rocksshared.CheckLayout(reflect.TypeFor[grocksdb.ReadOptions](), "_Ctype_struct_rocksdb_readoptions_t"))
	for name, typ := range map[string]reflect.Type{
		"other C type":    reflect.TypeFor[grocksdb.ReadOptions](),
		"no fields":       reflect.TypeFor[struct{}](),
		"not a pointer":   reflect.TypeFor[struct{ c uintptr }](),
		"another name":    reflect.TypeFor[struct{ p *int }](),
		"not first field": reflect.TypeFor[struct{ n, c *int }](),
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, rocksshared.CheckLayout(typ, "_Ctype_struct_rocksdb_transaction_t"), rocksshared.ErrLayout)
		})
	}
}
