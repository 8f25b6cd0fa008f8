package recordlock_test

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// scanKeys are the keys FuzzScan uses: few, so that writes collide, with the bytes that bound
// edges (0x00, 0xFF) among them.
var scanKeys = func() [][]byte {
	alphabet := []byte{0x00, 'a', 'b', 0xff}
	var keys [][]byte
	for _, x := range alphabet {
		keys = append(keys, []byte{x})
		for _, y := range alphabet {
			keys = append(keys, []byte{x, y})
		}
	}
	return keys
}()

// FuzzScan checks Scan against a model: a map of the database, and the Txn's staged writes as a
// list cut back by savepoints. After each step a scan of a range the input picks must show
// exactly the model's keys of that range, in order, with their values.
func FuzzScan(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{2, 0, 4, 1, 5, 3, 6, 9, 3, 2, 7, 0, 7, 20, 4, 4, 5, 6, 7, 8, 0xff, 0xfe})
	f.Add([]byte{4, 2, 3, 3, 6, 5, 7, 2, 1, 9, 4, 4, 4, 1, 1, 5, 0, 5, 1, 7, 19, 20})
	// A long program without a Commit, mostly staged writes, so that the Txn stages more writes
	// than its write list scans before it keeps a map of them.
	var long []byte
	rnd := rand.New(rand.NewPCG(29, 15))
	for range 150 {
		op := []byte{0, 1, 2, 2, 2, 3, 3, 4, 5}[rnd.IntN(9)]
		long = append(long, op, byte(rnd.IntN(256)), byte(rnd.IntN(256)), byte(rnd.IntN(256)))
	}
	f.Add(long)
	sdb := newScanDB(f)
	f.Fuzz(func(t *testing.T, program []byte) { runScanProgram(t, sdb, program) })
}

// scanDB is the database the inputs of FuzzScan run on, one after another in a fuzzing worker.
// Each input starts from an empty database by deleting every key, and each delete or overwrite
// leaves a version in RocksDB that every later scan skips until a compaction drops it. Over the
// hundred thousand inputs a worker runs (minimizing an input alone runs it thousands of times)
// those would pile up and slow each input down more and more, and the fuzzer with them, so the
// database is compacted every scanCompactEvery inputs.
type scanDB struct {
	db     *grocksdb.DB
	wo     *grocksdb.WriteOptions
	inputs int
}

const scanCompactEvery = 256

func newScanDB(tb testing.TB) *scanDB {
	wo := grocksdb.NewDefaultWriteOptions()
	tb.Cleanup(wo.Destroy)
	return &scanDB{db: openDB(tb), wo: wo}
}

// reset deletes every key an input may have written, and now and then compacts the database.
func (s *scanDB) reset(t *testing.T) {
	for _, k := range scanKeys {
		require.NoError(t, s.db.Delete(s.wo, k))
	}
	if s.inputs++; s.inputs%scanCompactEvery == 0 {
		s.db.CompactRange(grocksdb.Range{})
	}
}

// scanMaxProgram bounds the bytes of an input that FuzzScan runs. Every step scans RocksDB, so an
// input costs in proportion to its length, and minimizing it in proportion to the square: the
// fuzzer's mutations grew inputs that took 50 ms each. 1,024 bytes is over 250 steps, more than
// the longest seed.
const scanMaxProgram = 1024

// runScanProgram runs one input of FuzzScan on a database of its own.
func runScanProgram(t *testing.T, sdb *scanDB, program []byte) {
	program = program[:min(len(program), scanMaxProgram)]
	sdb.reset(t)
	db, wo := sdb.db, sdb.wo
	_, l := manual(t, db)
	txn := beginUnlocked(t, l)
	defer txn.Rollback()

	stored := map[string]string{}
	var staged []write
	var marks []int
	next := func() byte {
		if len(program) == 0 {
			return 0
		}
		b := program[0]
		program = program[1:]
		return b
	}
	for step := 0; len(program) > 0; step++ {
		op, k := next(), scanKeys[int(next())%len(scanKeys)]
		value := []byte{byte(step)}
		switch op % 7 {
		case 0:
			require.NoError(t, db.Put(wo, k, value))
			stored[string(k)] = string(value)
		case 1:
			require.NoError(t, db.Delete(wo, k))
			delete(stored, string(k))
		case 2:
			require.NoError(t, txn.Put(k, value))
			staged = append(staged, write{key: string(k), value: string(value)})
		case 3:
			require.NoError(t, txn.Delete(k))
			staged = append(staged, write{key: string(k), del: true})
		case 4:
			txn.SetSavePoint()
			marks = append(marks, len(staged))
		case 5:
			err := txn.RollbackToSavePoint()
			if len(marks) == 0 {
				require.ErrorIs(t, err, recordlock.ErrNoSavePoint)
				break
			}
			require.NoError(t, err)
			staged, marks = staged[:marks[len(marks)-1]], marks[:len(marks)-1]
		case 6: // the Txn commits and a new one begins
			apply(stored, staged)
			staged, marks = nil, nil
			require.NoError(t, txn.Commit())
			txn = beginUnlocked(t, l)
			defer txn.Rollback()
			continue
		}

		model := maps.Clone(stored)
		apply(model, staged)
		r := pickRange(next(), next())
		var want []string
		for _, key := range slices.Sorted(maps.Keys(model)) {
			if bytes.Compare([]byte(key), r.Start) >= 0 && (r.End == nil || bytes.Compare([]byte(key), r.End) < 0) {
				want = append(want, key+"="+model[key])
			}
		}
		require.Equal(t, want, scanned(t, txn, nil, r), "step %d, range %q", step, r)
	}
	// The model of a committed Txn is the database's: commit what is staged and compare.
	apply(stored, staged)
	require.NoError(t, txn.Commit())
	var want []string
	for _, key := range slices.Sorted(maps.Keys(stored)) {
		want = append(want, key+"="+stored[key])
	}
	require.Equal(t, want, scanned(t, beginUnlocked(t, l), nil, recordlock.Range{}), "after the last Commit")
}

// write is a staged write of FuzzScan's model.
type write struct {
	key, value string
	del        bool
}

// apply applies writes, in order, to the model of the database m.
func apply(m map[string]string, writes []write) {
	for _, w := range writes {
		if w.del {
			delete(m, w.key)
		} else {
			m[w.key] = w.value
		}
	}
}

// pickRange turns two bytes into a valid Range over scanKeys: bounds among the keys, none, or a
// Prefix, with the bounds in order.
func pickRange(a, b byte) recordlock.Range {
	if a%5 == 4 {
		return recordlock.Prefix(scanKeys[int(b)%len(scanKeys)][:1+int(a/5)%2%len(scanKeys[int(b)%len(scanKeys)])])
	}
	bound := func(x byte) []byte {
		if x%4 == 0 {
			return nil
		}
		return scanKeys[int(x/4)%len(scanKeys)]
	}
	start, end := bound(a), bound(b)
	if end != nil && bytes.Compare(end, start) <= 0 {
		start, end = end, start
		if bytes.Equal(start, end) {
			end = nil
		}
	}
	return recordlock.Range{Start: start, End: end}
}
