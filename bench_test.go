package recordlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock"
)

var benchOpts = recordlock.Options{Lease: 30 * time.Second}

// benchKeys returns n distinct keys with the given prefix.
func benchKeys(prefix string, n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%s/%08d", prefix, i)
	}
	return keys
}

// BenchmarkLockRelease is one goroutine taking and giving back free keys, rotating over 65,536
// of them so that the table's shards and heaps see many keys, on the real clock.
func BenchmarkLockRelease(b *testing.B) {
	l := newLocker(b, openDB(b))
	keys := benchKeys("k", 1<<16)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := l.Lock(ctx, keys[i&(len(keys)-1)], benchOpts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
		i++
	}
}

// BenchmarkLockReleaseParallel is GOMAXPROCS goroutines on distinct keys of their own.
func BenchmarkLockReleaseParallel(b *testing.B) {
	l := newLocker(b, openDB(b))
	ctx := context.Background()
	var id atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := benchKeys(fmt.Sprint(id.Add(1)), 1024)
		i := 0
		for pb.Next() {
			h, err := l.Lock(ctx, keys[i&(len(keys)-1)], benchOpts)
			if err != nil {
				b.Error(err)
				return
			}
			h.Release()
			i++
		}
	})
}

// BenchmarkLockReleaseHotKey is 4 goroutines contending for one key; b.N is the total number of
// Lock+Release pairs.
func BenchmarkLockReleaseHotKey(b *testing.B) {
	const goroutines = 4
	l := newLocker(b, openDB(b))
	key := []byte("hot")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range goroutines {
		n := b.N / goroutines
		if g < b.N%goroutines {
			n++
		}
		wg.Go(func() {
			for range n {
				h, err := l.Lock(ctx, key, benchOpts)
				if err != nil {
					b.Error(err)
					return
				}
				h.Release()
			}
		})
	}
	wg.Wait()
}
