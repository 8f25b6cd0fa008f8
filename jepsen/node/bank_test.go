package node

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/jepsen/history"
	"github.com/recordlock/recordlock/jepsen/resource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeHeld struct{}

func (fakeHeld) tokens() []resource.Token   { return nil }
func (fakeHeld) fence(f func() error) error { return f() }
func (fakeHeld) release()                   {}

// A deadlock's victim tries again, and each deadlock is counted, those a coordinator found
// across nodes apart.
func TestRetryCountsDeadlocks(t *testing.T) {
	within := &recordlock.DeadlockError{Cycle: []recordlock.DeadlockWait{{Key: []byte("a")}, {Key: []byte("b")}}}
	across := &recordlock.DeadlockError{Cycle: []recordlock.DeadlockWait{{Node: "node-a", Key: []byte("a")}, {Node: "node-b", Key: []byte("b")}}}
	errs := []error{within, across, within, nil}
	calls := 0
	var e history.BankEvent
	h, err := retry(&e, func() (heldAll, error) {
		err := errs[calls]
		calls++
		if err != nil {
			return nil, err
		}
		return fakeHeld{}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, fakeHeld{}, h)
	assert.Equal(t, 4, calls)
	assert.Equal(t, 3, e.Deadlocks)
	assert.Equal(t, 1, e.DeadlocksAcrossNodes)

	// Any other failure ends the operation.
	calls, e = 0, history.BankEvent{}
	_, err = retry(&e, func() (heldAll, error) { calls++; return nil, context.DeadlineExceeded })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, calls)
	assert.Zero(t, e.Deadlocks)
}

// Only recordlock locks a transfer's accounts one at a time in the transfer's order: etcd's
// Mutex has no deadlock detection, so the control takes them in key order.
func TestOnlyRecordlockLocksEach(t *testing.T) {
	var rl, ctl lock = &recordlockLock{}, &mutexLock{}
	_, ok := rl.(eachLocker)
	assert.True(t, ok)
	_, ok = ctl.(eachLocker)
	assert.False(t, ok)
}
