package recordlock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/recordlock/recordlock"
)

// BenchmarkTxnKeyInsideOneOfManyRanges is a Txn that holds m disjoint exclusive ranges finding
// the one over a key: a Lock of the key, which returns that range's handle, and a Put under it.
func BenchmarkTxnKeyInsideOneOfManyRanges(b *testing.B) {
	for _, m := range []int{1000, 8000, 64000} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			l := newLocker(b, openDB(b))
			ctx := context.Background()
			txn := l.Begin()
			defer txn.Rollback()
			for i := range m {
				start := fmt.Appendf(nil, "r%06d/", i)
				if _, err := txn.LockRange(ctx, recordlock.Range{Start: start, End: fmt.Appendf(nil, "r%06d0", i)}, benchOpts); err != nil {
					b.Fatal(err)
				}
			}
			key := fmt.Appendf(nil, "r%06d/x", m/2)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := txn.Lock(ctx, key, benchOpts); err != nil {
					b.Fatal(err)
				}
				if err := txn.Put(key, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
