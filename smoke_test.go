package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestSmoke(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	h, err := l.Lock(ctx, []byte("a"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	_, err = l.TryLock([]byte("a"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	got := make(chan *recordlock.Handle)
	go func() {
		h2, err := l.Lock(ctx, []byte("a"), recordlock.Options{Timeout: time.Minute})
		require.NoError(t, err)
		got <- h2
	}()
	time.Sleep(10 * time.Millisecond)
	clk.Advance(time.Second)
	h2 := <-got
	require.True(t, h.IsExpired())
	require.False(t, h.Release())
	require.True(t, h2.Release())
}
