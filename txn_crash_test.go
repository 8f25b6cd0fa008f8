package recordlock_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// The crash-consistency workload: bank accounts holding decimal balances that transfers move
// money between, so the total is conserved by every committed Txn and by none half-written.
const (
	crashDBEnv     = "RECORDLOCK_CRASH_DB" // set only in the child process: the database it works on
	crashAccounts  = 8
	crashBalance   = 1000
	crashWorkers   = 4
	crashReadyMark = "ready"
)

// transferOnce moves amount from one account to another in one Txn that locks both with LockAll.
func transferOnce(ctx context.Context, l *recordlock.Locker, txnOpts recordlock.TxnOptions, from, to []byte, amount int) error {
	txn, err := l.BeginTx(txnOpts)
	if err != nil {
		return err
	}
	defer txn.Rollback()
	if _, err := txn.LockAll(ctx, recordlock.Options{}, from, to); err != nil {
		return err
	}
	balances := make([]int, 2)
	for i, k := range [][]byte{from, to} {
		v, err := txn.Get(k)
		if err != nil {
			return err
		}
		if balances[i], err = strconv.Atoi(string(v)); err != nil {
			return fmt.Errorf("account %s holds %q: %w", k, v, err)
		}
	}
	if err := txn.Put(from, strconv.AppendInt(nil, int64(balances[0]-amount), 10)); err != nil {
		return err
	}
	if err := txn.Put(to, strconv.AppendInt(nil, int64(balances[1]+amount), 10)); err != nil {
		return err
	}
	return txn.Commit()
}

// openPath opens the database at dir, which the caller closes.
func openPath(t testing.TB, dir string) *grocksdb.DB {
	t.Helper()
	db, err := tempdb.OpenAt(dir)
	require.NoError(t, err)
	return db
}

// TestTxnCrashChild is the child process of TestTxnCrashConsistency: it runs transfers with
// Sync until it is killed. Run on its own it skips.
func TestTxnCrashChild(t *testing.T) {
	dir := os.Getenv(crashDBEnv)
	if dir == "" {
		t.Skip("the child process of TestTxnCrashConsistency")
	}
	db := openPath(t, dir)
	defer db.Close()
	l := newLocker(t, db)
	// Bounded, so that a child whose parent died does not run on forever.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var committed sync.WaitGroup
	committed.Add(crashWorkers)
	var wg sync.WaitGroup
	for w := range crashWorkers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for n := 0; ctx.Err() == nil; n++ {
				from, to := r.IntN(crashAccounts), r.IntN(crashAccounts-1)
				if to >= from {
					to++
				}
				err := transferOnce(ctx, l, recordlock.TxnOptions{Sync: true}, account(from), account(to), 1+r.IntN(50))
				if err != nil && ctx.Err() == nil {
					t.Errorf("transfer: %v", err)
					return
				}
				if n == 10 {
					committed.Done()
				}
			}
		})
	}
	committed.Wait()
	fmt.Println(crashReadyMark) // every worker is committing: the parent may kill us now
	wg.Wait()
}

// A process killed at any instant leaves every Txn wholly written or not at all: after each of
// five SIGKILLs at a random instant of the transfer workload, reopening the database finds every
// account readable and the total balance intact.
func TestTxnCrashConsistency(t *testing.T) {
	dir := t.TempDir()
	db := openPath(t, dir)
	for i := range crashAccounts {
		dbPut(t, db, string(account(i)), strconv.Itoa(crashBalance))
	}
	db.Close()

	moved := 0
	for round := range 5 {
		var stderr bytes.Buffer
		cmd := exec.Command(os.Args[0], "-test.run=^TestTxnCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDBEnv+"="+dir)
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == crashReadyMark {
					ready <- true
					return
				}
			}
			ready <- false
		}()
		select {
		case ok := <-ready:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("round %d: the child ended before it was ready: %s", round, stderr.String())
			}
		case <-time.After(guard):
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: the child was not ready within %v: %s", round, guard, stderr.String())
		}
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond) // a random instant mid-workload
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		err = cmd.Wait()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr, "round %d: the child must die by the signal: %s", round, stderr.String())
		ws, ok := exitErr.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "round %d: %v: %s", round, err, stderr.String())

		db := openPath(t, dir)
		total, changed := 0, 0
		for i := range crashAccounts {
			v := dbGet(t, db, string(account(i)))
			n, err := strconv.Atoi(string(v))
			if assert.NoError(t, err, "round %d: account %d holds %q", round, i, v) {
				total += n
				if n != crashBalance {
					changed++
				}
			}
		}
		db.Close()
		assert.Equal(t, crashAccounts*crashBalance, total, "round %d: the total balance is conserved", round)
		moved += changed
	}
	assert.Positive(t, moved, "the children committed transfers before they were killed")
}
