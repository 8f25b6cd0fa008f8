package recordlock_test

import (
	"context"
	"math"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A nil, an empty and an over-long key each get a message that says which it was, and each
// still matches ErrInvalidKey, from Locker and Txn alike; nothing is locked or staged.
func TestInvalidKeyMessages(t *testing.T) {
	_, l := manual(t, openDB(t))
	ctx := context.Background()
	// A key one byte past 2 GiB, mapped read-only and never touched: the check reads only its
	// length, so no page of it is ever backed by memory.
	tooLong, err := syscall.Mmap(-1, 0, math.MaxInt32+1, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, syscall.Munmap(tooLong)) })
	for _, c := range []struct {
		name string
		key  []byte
		msg  string
	}{
		{"nil", nil, "recordlock: invalid key: a key must be non-empty and at most 2 GiB; got a nil key"},
		{"empty", []byte{}, "recordlock: invalid key: a key must be non-empty and at most 2 GiB; got an empty key"},
		{"too long", tooLong, "recordlock: invalid key: a key must be non-empty and at most 2 GiB; got a key of 2147483648 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := l.Lock(ctx, c.key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrInvalidKey)
			assert.EqualError(t, err, c.msg)
			_, err = l.TryLock(c.key, recordlock.Options{})
			assert.EqualError(t, err, c.msg)
			if len(c.key) > 0 {
				return // a Txn's Get and Put take keys of any non-zero length
			}
			txn := l.Begin()
			defer txn.Rollback()
			_, err = txn.Lock(ctx, c.key, recordlock.Options{})
			assert.EqualError(t, err, c.msg)
			_, err = txn.LockAll(ctx, recordlock.Options{}, []byte("fine"), c.key)
			assert.EqualError(t, err, c.msg)
			_, err = txn.Get(c.key)
			assert.EqualError(t, err, c.msg)
			assert.EqualError(t, txn.Put(c.key, []byte("v")), c.msg)
			assert.EqualError(t, txn.Delete(c.key), c.msg)
		})
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A Range whose End is not after its Start, or whose bound is over-long, gets a message about the
// range, not the rule for a key, from every call that takes one; it still matches ErrInvalidKey,
// and nothing is locked.
func TestInvalidRangeMessages(t *testing.T) {
	_, l := manual(t, openDB(t))
	ctx := context.Background()
	tooLong, err := syscall.Mmap(-1, 0, math.MaxInt32+1, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, syscall.Munmap(tooLong)) })
	for _, c := range []struct {
		name string
		r    recordlock.Range
		msg  string
	}{
		{"End before Start", rng("b", "a"), `recordlock: invalid range: End "a" is not after Start "b"`},
		{"End equal to Start", rng("b", "b"), `recordlock: invalid range: End "b" is not after Start "b"`},
		{"empty End", recordlock.Range{Start: []byte("a"), End: []byte{}},
			`recordlock: invalid range: End "" is not after Start "a" (a nil End has no bound)`},
		{"Start too long", recordlock.Range{Start: tooLong},
			"recordlock: invalid range: Start is 2147483648 bytes; a bound must be at most 2 GiB"},
		{"End too long", recordlock.Range{End: tooLong},
			"recordlock: invalid range: End is 2147483648 bytes; a bound must be at most 2 GiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := l.LockRange(ctx, c.r, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrInvalidKey, "an invalid range is rejected with ErrInvalidKey before anything is locked")
			assert.EqualError(t, err, c.msg)
			_, err = l.TryLockRange(c.r, recordlock.Options{})
			assert.EqualError(t, err, c.msg)
			txn := l.Begin()
			defer txn.Rollback()
			_, err = txn.LockRange(ctx, c.r, recordlock.Options{})
			assert.EqualError(t, err, c.msg)
			assert.EqualError(t, txn.Scan(c.r, func(_, _ []byte) error { return nil }), c.msg)
		})
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A nil ctx fails as net/http's NewRequestWithContext does, with an error that says so (and
// matches ErrInvalidOptions), before anything is locked; the Txn stays usable.
func TestNilContextIsAnError(t *testing.T) {
	_, l := manual(t, openDB(t))
	var nilCtx context.Context
	key := []byte("k")
	const msg = "recordlock: invalid options: nil Context"

	h, err := l.Lock(nilCtx, key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	assert.EqualError(t, err, msg)
	assert.Nil(t, h)
	_, err = l.LockCF(nilCtx, nil, key, recordlock.Options{})
	assert.EqualError(t, err, msg)

	txn := l.Begin()
	defer txn.Rollback()
	_, err = txn.Lock(nilCtx, key, recordlock.Options{})
	assert.EqualError(t, err, msg)
	_, err = txn.LockAll(nilCtx, recordlock.Options{}, key, []byte("other"))
	assert.EqualError(t, err, msg)
	assert.True(t, recordlock.ProbeTableEmpty(l), "a nil ctx locks and queues nothing")

	// A key the Txn already holds goes through the re-lock path: it fails the same way.
	_, err = txn.Lock(context.Background(), key, recordlock.Options{})
	require.NoError(t, err)
	_, err = txn.Lock(nilCtx, key, recordlock.Options{})
	assert.EqualError(t, err, msg)
	require.NoError(t, txn.Put(key, []byte("v")), "the Txn is still usable")
	require.NoError(t, txn.Commit())
}
